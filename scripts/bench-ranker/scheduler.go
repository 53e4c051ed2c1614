package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"sextant.io/sextant/ranker/profile"
)

// clockTicksPerSecond is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux architecture the project builds for.
const clockTicksPerSecond = 100

// processCPU returns the CPU time (user + system) the process has used so far.
func processCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read CPU time: %w", err)
	}
	return parseStatCPU(string(raw))
}

// processPeakRSS returns the process's peak resident set size in bytes.
func processPeakRSS(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read peak memory: %w", err)
	}
	return parseStatusPeakRSS(string(raw))
}

// parseStatusPeakRSS reads VmHWM ("VmHWM:   123456 kB") from a /proc/<pid>/status.
func parseStatusPeakRSS(status string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		rest, ok := strings.CutPrefix(line, "VmHWM:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("parse /proc status: VmHWM %q, want \"<n> kB\"", strings.TrimSpace(rest))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc status: VmHWM %q: %w", f[0], err)
		}
		return kb << 10, nil
	}
	return 0, errors.New("parse /proc status: no VmHWM line")
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a /proc/<pid>/stat line.
// The command name (field 2) may hold spaces and parentheses, so fields are counted
// from the last ')'.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc stat %q: no ')' after the command name", stat)
	}
	fields := strings.Fields(stat[i+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("parse /proc stat: %d fields after the command name, want at least 13", len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc stat: CPU time %q: %w", f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicksPerSecond, nil
}

// schedProc is a scheduler process the harness started.
type schedProc struct {
	port    int
	cmd     *exec.Cmd
	logPath string
	readyAt time.Time
	done    chan struct{}
	logFile *os.File
}

func (p *schedProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *schedProc) stop() {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	_ = p.logFile.Close()
}

const banner = "################################################################################"

// startScheduler starts the scheduler for sched and waits until it is ready. For
// sextant it enables the sextant plugins; if the binary does not know them yet, it
// starts it again with a plain profile and says so loudly.
func (b *bench) startScheduler(ctx context.Context, sched string) (*schedProc, string, error) {
	bin := b.o.kubeScheduler
	plugins := false
	var env []string
	switch sched {
	case schedSextant:
		bin, plugins = b.o.sextantRanker, true
	case schedRankerDefault:
		bin = b.o.sextantRanker
	}
	if bin == b.o.sextantRanker {
		env = b.o.rankerEnv
	}
	p, err := b.launch(ctx, sched, bin, plugins, env)
	if err == nil || !plugins {
		return p, "", err
	}
	// Only an unknown plugin falls back; anything else (bad args, a crash) is an error.
	var said []string
	for _, line := range strings.Split(readTail(p.logPath, 16000), "\n") {
		if strings.Contains(line, "does not exist") && (strings.Contains(line, "BandwidthAware") ||
			strings.Contains(line, "NUMAAware") || strings.Contains(line, "DeviceAware")) {
			said = append(said, line)
		}
	}
	if len(said) == 0 {
		return nil, "", err
	}
	fmt.Fprintf(os.Stderr, "%s\nWARNING: %s does not know the sextant plugins (BandwidthAware, NUMAAware,\n"+
		"DeviceAware) yet; running it with a PLAIN profile, so the sextant numbers below are\n"+
		"kube-scheduler's own. Its log said:\n%s\n%s\n", banner, bin, strings.Join(said, "\n"), banner)
	p, err = b.launch(ctx, sched+"-plain", bin, false, env)
	return p, "PLUGINS MISSING: plain profile", err
}

// portAttempts is how many ports launch tries: the one freePort found can be taken by
// another process before the scheduler binds it (kube-scheduler takes port 0 to mean
// no server, so it cannot pick its own).
const portAttempts = 3

// launch starts bin as the scheduler name, with env added to the bench's environment,
// on another port if the one it was given was taken first.
func (b *bench) launch(ctx context.Context, name, bin string, plugins bool, env []string) (*schedProc, error) {
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		p, err := b.launchOn(ctx, name, bin, plugins, env, port)
		if err != nil && attempt < portAttempts && p != nil && p.exited() && portTaken(readTail(p.logPath, 16000)) {
			logf("%s nodes: %s found port %d taken; starting it again on another", b.label(), name, port)
			p.stop()
			continue
		}
		return p, err
	}
}

// portTaken says whether the tail of a scheduler's log has it failing to bind its port.
func portTaken(log string) bool {
	return strings.Contains(log, "bind: address already in use")
}

// launchOn starts bin as the scheduler name on port and waits until it is ready.
func (b *bench) launchOn(ctx context.Context, name, bin string, plugins bool, env []string, port int) (*schedProc, error) {
	sched := strings.TrimSuffix(name, "-plain")
	cfgPath := b.fileName(name, "yaml")
	if err := os.WriteFile(cfgPath, []byte(schedulerConfig(b.o.kubeconfig, "bench-"+sched, b.o.schedulerQPS, plugins)), 0o644); err != nil {
		return nil, fmt.Errorf("write scheduler config: %w", err)
	}
	logPath := b.fileName(name, "log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create scheduler log: %w", err)
	}
	cmd := exec.Command(bin, "--config", cfgPath,
		"--authentication-kubeconfig", b.o.kubeconfig, "--authorization-kubeconfig", b.o.kubeconfig,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	// Its own process group: a ^C to the bench reaches the scheduler only through stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf("%s nodes: starting %s (%s, port %d, log %s) %s", b.label(), name, bin, port, logPath, strings.Join(env, " "))
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &schedProc{port: port, cmd: cmd, logPath: logPath, done: make(chan struct{}), logFile: logFile}
	go func() { _ = cmd.Wait(); close(p.done) }()

	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		// The scheduler serves a self-signed certificate on its own port.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec
	}}
	url := fmt.Sprintf("https://127.0.0.1:%d/readyz", port)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if p.exited() {
			return p, fmt.Errorf("%s exited before it was ready; see %s", name, logPath)
		}
		if resp, err := client.Get(url); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				p.readyAt = time.Now()
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.stop()
			return p, fmt.Errorf("%s not ready after 3m; see %s", name, logPath)
		}
		select {
		case <-ctx.Done():
			p.stop()
			return p, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func schedulerConfig(kubeconfig, schedulerName string, qps int, plugins bool) string {
	var s strings.Builder
	fmt.Fprintf(&s, `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %d
  burst: %d
leaderElection:
  leaderElect: false
profiles:
- schedulerName: %s
`, kubeconfig, qps, qps, schedulerName)
	if plugins {
		// The chart's plugins (profile.Plugins). staleAfter: the bench has no agents;
		// heartbeats are refreshed once before each run, and a long run must not turn
		// them stale half-way.
		s.WriteString(profile.Plugins)
		s.WriteString(`  pluginConfig:
  - name: BandwidthAware
    args:
      staleAfter: 1h
`)
	}
	return s.String()
}

// scrapeMetrics reads the scheduler's /metrics as the admin (its delegated
// authorization lets system:masters in).
func (b *bench) scrapeMetrics(ctx context.Context, port int) (string, error) {
	return b.getSecure(ctx, port, "/metrics", 30*time.Second)
}

// getSecure GETs path from the scheduler's secure port as the admin.
func (b *bench) getSecure(ctx context.Context, port int, path string, timeout time.Duration) (string, error) {
	tlsCfg, err := rest.TLSConfigFor(b.cfg)
	if err != nil {
		return "", fmt.Errorf("client TLS config: %w", err)
	}
	// The scheduler serves a self-signed certificate; only the client side matters.
	tlsCfg.RootCAs, tlsCfg.InsecureSkipVerify = nil, true
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d%s", port, path), nil)
	if err != nil {
		return "", fmt.Errorf("request %s: %w", path, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("get %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("get %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return string(body), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func readTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	data, _ := io.ReadAll(f)
	return string(data)
}
