// Command sextant-sidecar-wrapper runs a sidecar's command so that stopping the sidecar
// is quick and cannot fail its pod. sextant's admission webhook puts it in front of every
// sidecar it prepares (docs/sidecars.md):
//
//   - An init container runs `sextant-sidecar-wrapper install /.sextant/sextant-sidecar-wrapper`
//     to copy this static binary into an emptyDir the sidecar mounts.
//   - The sidecar's command becomes the wrapper; its original command is held in a pod
//     annotation that the downward API hands to it as $SEXTANT_SIDECAR_COMMAND (a JSON
//     array); its args stay in the pod spec, so the kubelet still expands $(VAR) in them.
//
// As PID 1 of the container, the wrapper starts the command as its child, forwards
// signals to it and reaps orphans. Because the command is not PID 1, a SIGTERM it does
// not handle ends it (busybox `sleep` as PID 1 ignores SIGTERM). When the wrapper was
// asked to stop (SIGTERM, SIGINT or SIGQUIT) it exits 0 once the child is gone, whatever
// the child's exit code; otherwise it exits with the child's code.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"sextant.io/sextant/api/sidecarcommand"
	"sextant.io/sextant/internal/version"
)

// EnvCommand holds the sidecar's command as a JSON array of strings.
const EnvCommand = sidecarcommand.Env

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if raw, ok := os.LookupEnv(EnvCommand); ok {
		return runSidecar(raw, args)
	}
	if len(args) == 1 && args[0] == "--version" {
		fmt.Println("sextant-sidecar-wrapper", version.Version)
		return 0
	}
	if len(args) == 2 && args[0] == "install" {
		if err := install(args[1]); err != nil {
			fmt.Fprintln(os.Stderr, "sextant-sidecar-wrapper:", err)
			return 1
		}
		return 0
	}
	if len(args) == 1 && (args[0] == "--help" || args[0] == "-h") {
		usage(os.Stdout)
		return 0
	}
	fmt.Fprintf(os.Stderr, "sextant-sidecar-wrapper: arguments %q: not a form it takes, and $%s is not set\n", args, EnvCommand)
	usage(os.Stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `usage:
  sextant-sidecar-wrapper install DEST   copy this binary to DEST (mode 0755)
  sextant-sidecar-wrapper --version      print the version
  sextant-sidecar-wrapper --help         print this help
  %s='["cmd","arg"]' sextant-sidecar-wrapper [ARGS...]
                                         run cmd arg ARGS... as a sidecar
`, EnvCommand)
}

// install copies the running binary to dest, atomically.
func install(dest string) error {
	if dest == "" {
		return errors.New("install: DEST is empty; want the path to copy the wrapper to")
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("open own binary: %w", err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".sextant-sidecar-wrapper-")
	if err != nil {
		return fmt.Errorf("install to %s: %w", dest, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("copy to %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return fmt.Errorf("install to %s: %w", dest, err)
	}
	return nil
}

// parseCommand reads the JSON array of EnvCommand and expands $(VAR) references in it
// the way the kubelet expands them in a container's command.
func parseCommand(raw string, lookup func(string) (string, bool)) ([]string, error) {
	cmd, err := sidecarcommand.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("$%s=%q: %w; want %s", EnvCommand, raw, err, sidecarcommand.Form)
	}
	for i := range cmd {
		cmd[i] = expand(cmd[i], lookup)
	}
	return cmd, nil
}

// expand replaces $(NAME) with NAME's value where it is set, leaves it as written where
// not, and turns $$ into $: the kubelet's rules for command and args.
func expand(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				// Unterminated: "$(" as written, and what follows is read on, $$ and
				// all, as the kubelet does.
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok && name != "" {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// stopSignals are the signals a runtime stops a container with (SIGTERM by default, an
// image's STOPSIGNAL otherwise): after one of them the sidecar's end is a success.
var stopSignals = map[os.Signal]bool{syscall.SIGTERM: true, syscall.SIGINT: true, syscall.SIGQUIT: true}

func runSidecar(raw string, args []string) int {
	cmd, err := parseCommand(raw, os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sextant-sidecar-wrapper:", err)
		return 1
	}
	argv := append(cmd, args...)
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "sextant-sidecar-wrapper: the command of $%s: %v\n", EnvCommand, err)
		return 127
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs) // all of them: forward what the child should see
	child, err := os.StartProcess(path, argv, &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Env:   withoutCommand(os.Environ()),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "sextant-sidecar-wrapper:", err)
		return 126
	}
	stopping := false
	for {
		sig := <-sigs
		if sig == syscall.SIGCHLD {
			if code, done := reap(child.Pid); done {
				if stopping {
					return 0
				}
				return code
			}
			continue
		}
		if sig == syscall.SIGURG || sig == syscall.SIGPIPE {
			continue // the Go runtime's own preemption signal; and ours to ignore
		}
		if stopSignals[sig] {
			stopping = true
		}
		_ = child.Signal(sig)
	}
}

// reap collects every exited child (as PID 1 the wrapper inherits orphans) and reports
// whether the sidecar's own process was among them, with its exit code.
func reap(pid int) (code int, done bool) {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || got <= 0 {
			return code, done
		}
		if got == pid {
			done = true
			switch {
			case ws.Exited():
				code = ws.ExitStatus()
			case ws.Signaled():
				code = 128 + int(ws.Signal())
			}
		}
	}
}

func withoutCommand(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, EnvCommand+"=") {
			out = append(out, kv)
		}
	}
	return out
}
