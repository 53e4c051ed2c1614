package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the wrapper when this is set.
const beWrapper = "SEXTANT_TEST_BE_WRAPPER"

func TestMain(m *testing.M) {
	if os.Getenv(beWrapper) == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func TestExpand(t *testing.T) {
	env := map[string]string{"A": "1", "PORT": "15001", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cases := map[string]string{
		"plain":              "plain",
		"$(A)":               "1",
		"--port=$(PORT)":     "--port=15001",
		"$(MISSING)":         "$(MISSING)",
		"$$(A)":              "$(A)",
		"$$":                 "$",
		"a$b":                "a$b",
		"$(A":                "$(A",
		"$(a$$":              "$(a$",
		"$()":                "$()",
		"$(EMPTY)x":          "x",
		"$(A)$(PORT)$":       "115001$",
		"echo $HOME $(A)/$$": "echo $HOME 1/$",
	}
	for in, want := range cases {
		if got := expand(in, lookup); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseCommand(t *testing.T) {
	got, err := parseCommand(`["/bin/envoy","--base-id","$(A)"]`, func(k string) (string, bool) { return "7", k == "A" })
	if err != nil || len(got) != 3 || got[2] != "7" {
		t.Errorf("parseCommand = %q, %v", got, err)
	}
	for _, bad := range []string{"", "envoy", `{"a":1}`, `[1]`, `null`, `[]`, `[""]`, `["printf",null]`} {
		if _, err := parseCommand(bad, os.LookupEnv); err == nil {
			t.Errorf("parseCommand(%q): no error", bad)
		}
	}
}

// wrapper starts the test binary as the wrapper around command and args.
func wrapper(t *testing.T, command string, args ...string) *exec.Cmd {
	t.Helper()
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("needs /bin/sh")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), beWrapper+"=1", EnvCommand+"="+command, "GREETING=hello")
	return cmd
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

func TestExitCodePassesThroughWhenNotStopped(t *testing.T) {
	// $(GREETING) in the command is expanded by the wrapper, as the kubelet would have;
	// the args come after the command unchanged.
	out, err := wrapper(t, `["/bin/sh","-c","echo $(GREETING) $0 $1; exit 3"]`, "arg0", "$(GREETING)").Output()
	if code := exitCode(t, err); code != 3 {
		t.Errorf("exit code %d, want the child's 3", code)
	}
	if got, want := string(out), "hello arg0 $(GREETING)\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

// startReady starts cmd and returns once its child has printed its first line: the
// wrapper installs its signal handler before it starts the child, so a SIGTERM sent
// from then on reaches the handler, not the default action.
func startReady(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan error, 1)
	go func() {
		_, err := bufio.NewReader(out).ReadString('\n')
		line <- err
	}()
	select {
	case err := <-line:
		if err != nil {
			t.Fatalf("the child printed no line: %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the child printed no line in 30s")
	}
}

// A SIGTERM ends the wrapper with 0 whatever the sidecar makes of it. Each command
// prints a line once it runs (see startReady).
func TestStopExitsZero(t *testing.T) {
	for _, tc := range []struct{ name, command string }{
		// A sidecar that exits 1 on SIGTERM, and a child of it that ignores SIGTERM
		// (its output elsewhere, so that it does not hold the test's pipe open).
		{"child that exits non-zero", `["/bin/sh","-c","trap 'exit 1' TERM; sleep 30 >/dev/null & echo ready; wait"]`},
		// sleep, which would ignore SIGTERM as PID 1, is not PID 1 under the wrapper.
		{"sleep", `["/bin/sh","-c","echo ready; exec sleep 30"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := wrapper(t, tc.command)
			startReady(t, cmd)
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if code := exitCode(t, err); code != 0 {
					t.Errorf("exit code %d after SIGTERM, want 0", code)
				}
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatal("the wrapper did not stop within 10s of SIGTERM (its command sleeps 30s)")
			}
		})
	}
}

func TestMissingCommand(t *testing.T) {
	if code := exitCode(t, wrapper(t, `["/no/such/binary"]`).Run()); code != 127 {
		t.Errorf("exit code %d, want 127", code)
	}
	// The webhook never writes an empty command: one is a broken pod, not a sidecar
	// with nothing to do.
	if code := exitCode(t, wrapper(t, `[]`).Run()); code != 1 {
		t.Errorf("empty command: exit code %d, want 1", code)
	}
}

func TestInstall(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "w")
	cmd := exec.Command(self, "install", dest)
	cmd.Env = append(os.Environ(), beWrapper+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	st, err := os.Stat(dest)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.Stat(self)
	if st.Mode().Perm() != 0o755 || st.Size() != want.Size() {
		t.Errorf("installed %v %d bytes, want 0755 %d bytes", st.Mode(), st.Size(), want.Size())
	}
}

func TestVersion(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--version")
	cmd.Env = append(os.Environ(), beWrapper+"=1")
	out, err := cmd.Output()
	if err != nil || string(out) != "sextant-sidecar-wrapper dev\n" {
		t.Errorf("--version: %q, %v; want \"sextant-sidecar-wrapper dev\" (the version of a build without -ldflags)", out, err)
	}
}

// --help and -h are answered with exit 0; anything the wrapper does not know, with the
// usage and exit 2.
func TestUsageExitCodes(t *testing.T) {
	t.Setenv(EnvCommand, "")
	os.Unsetenv(EnvCommand)
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--help"}, 0},
		{[]string{"-h"}, 0},
		{[]string{"--version"}, 0},
		{[]string{"--bogus"}, 2},
		{nil, 2},
		{[]string{"install"}, 2},
	} {
		if got := run(tc.args); got != tc.want {
			t.Errorf("run(%q) = %d, want %d", tc.args, got, tc.want)
		}
	}
}
