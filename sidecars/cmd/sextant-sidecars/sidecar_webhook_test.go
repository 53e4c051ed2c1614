package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sextant.io/sextant/internal/flagcheck/flagchecktest"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
)

// The webhook command refuses, before anything starts, flags that would write invalid values
// into the pods it mutates or that its certificate manager or lease cannot use, naming
// the flag, its value and the accepted form.
func TestSidecarWebhookFlags(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	base := []string{"--wrapper-image", "ghcr.io/sextant/wrapper:v1", "--exit-image", "ghcr.io/sextant/exit@sha256:" + strings.Repeat("a", 64)}
	cert := []string{"--cert-secret", "sextant-webhook-tls", "--cert-namespace", "sextant-system"}
	with := func(args ...[]string) []string {
		var all []string
		for _, a := range args {
			all = append(all, a...)
		}
		return all
	}
	flagchecktest.Run(t, []flagchecktest.Case{
		{"defaults", base, ""},
		{"a digest and registry port", with(base, []string{"--wrapper-image", "registry.local:5000/w:dev@sha256:" + strings.Repeat("0", 64)}), ""},
		{"pull secrets", with(base, []string{"--image-pull-secrets", "regcred,other.cred"}), ""},
		{"no virtual nodes, no exit image", []string{"--wrapper-image", "w", "--virtual-nodes=false"}, ""},
		{"self-managed certificate", with(base, cert), ""},
		{"no wrapper image", []string{"--exit-image", "e"}, "--wrapper-image is required"},
		{"bad wrapper image", with(base, []string{"--wrapper-image", "not a valid image ref!!"}), `--wrapper-image "not a valid image ref!!"` + flagchecktest.ImageForm},
		{"uppercase wrapper image", with(base, []string{"--wrapper-image", "Sextant/Wrapper"}), `--wrapper-image "Sextant/Wrapper"` + flagchecktest.ImageForm},
		{"wrapper image with a space", with(base, []string{"--wrapper-image", " w"}), `--wrapper-image " w"` + flagchecktest.ImageForm},
		{"bad pull policy", with(base, []string{"--wrapper-pull-policy", "always"}), `--wrapper-pull-policy "always": want Always, IfNotPresent or Never`},
		{"small install container", with(base, []string{"--install-cpu", "10m", "--install-memory", "16Mi"}), ""},
		{"install cpu 0", with(base, []string{"--install-cpu", "0"}), `--install-cpu "0": want a positive quantity, such as 100m`},
		{"install memory not a quantity", with(base, []string{"--install-memory", "lots"}), `--install-memory "lots": want a positive quantity, such as 32Mi`},
		{"bad pull secret", with(base, []string{"--image-pull-secrets", "Bad Name!"}), `--image-pull-secrets "Bad Name!": want a Secret name: a lowercase RFC 1123 subdomain`},
		{"empty pull secret", with(base, []string{"--image-pull-secrets", "a,,b"}), `--image-pull-secrets is empty: want a Secret name`},
		{"no exit image", []string{"--wrapper-image", "w"}, "--exit-image is required with --virtual-nodes"},
		{"bad exit image", with(base, []string{"--exit-image", "e e"}), `--exit-image "e e"` + flagchecktest.ImageForm},
		{"bad pod selector", with(base, []string{"--pod-selector", "a=(b"}), `--pod-selector "a=(b": want a label selector such as app=x,tier in (a,b): `},
		{"empty lease name", with(base, []string{"--leader-elect-name", ""}), "--leader-elect-name is empty: want a Lease name"},
		{"cert validity 0", with(base, cert, []string{"--cert-validity", "0"}), "--cert-validity 0s: want a positive duration such as 8760h"},
		{"cert validity -1h", with(base, cert, []string{"--cert-validity", "-1h"}), "--cert-validity -1h0m0s: want a positive duration such as 8760h"},
		{"cert validity within resync", with(base, cert, []string{"--cert-validity", "2m"}), "--cert-validity 2m0s: want more than 3 x --cert-resync (1m0s), as the certificate is renewed when a third of its validity is left; such as 8760h"},
		{"cert resync 0", with(base, cert, []string{"--cert-resync", "0"}), "--cert-resync 0s: want a positive duration such as 1m"},
		{"cert without namespace", with(base, []string{"--cert-secret", "s"}), "--cert-secret s: --cert-namespace (or $POD_NAMESPACE) is required"},
		{"bad cert secret", with(base, []string{"--cert-secret", "S_1", "--cert-namespace", "ns"}), `--cert-secret "S_1": want a Secret name: `},
		{"bad cert namespace", with(base, []string{"--cert-secret", "s", "--cert-namespace", "a.b"}), `--cert-namespace "a.b": want a namespace: `},
		{"bad cert service", with(base, cert, []string{"--cert-service", "1svc"}), `--cert-service "1svc": want a Service name: `},
		{"bad webhook configuration", with(base, cert, []string{"--cert-mutating-webhook-configurations", "Mut"}), `--cert-mutating-webhook-configurations "Mut": want a MutatingWebhookConfiguration name: `},
		{"empty validating configuration", with(base, cert, []string{"--cert-validating-webhook-configurations", "a,"}), `--cert-validating-webhook-configurations is empty: want a ValidatingWebhookConfiguration name`},
		{"no review in flight", with(base, []string{"--max-inflight", "0"}), "--max-inflight 0: want at least 1"},
		{"read timeout 0", with(base, []string{"--read-timeout", "0s"}), "--read-timeout 0s: want a positive duration, such as 10s"},
		{"header timeout beyond read timeout", with(base, []string{"--read-header-timeout", "20s"}), "--read-header-timeout 20s: want at most --read-timeout (10s)"},
		{"body limit below a pod", with(base, []string{"--max-body-bytes", "1000"}), "--max-body-bytes 1000: want at least 65536"},
		{"bodies in flight below one body", with(base, []string{"--max-inflight-body-bytes", "1048576"}), "--max-inflight-body-bytes 1048576: want at least --max-body-bytes (7340032)"},
		{"metrics limits", with(base, []string{"--metrics-addr", ":9465", "--metrics-idle-timeout", "0s"}), "--metrics-idle-timeout 0s: want a positive duration"},
		{"metrics limits without metrics", with(base, []string{"--metrics-idle-timeout", "0s"}), ""},
	}, sidecarWebhookCommand, webhookOptions.validateWebhook)
}

// virtual-node-controller refuses, before it makes a client, a lease it cannot take (it
// would retry "resource name may not be empty" forever), an exit image pods cannot run,
// and lease durations leader election refuses.
func TestVirtualNodeControllerFlags(t *testing.T) {
	base := []string{"--exit-image", "ghcr.io/sextant/exit:v1", "--leader-elect-namespace", "sextant-system"}
	flagchecktest.Run(t, []flagchecktest.Case{
		{"defaults", base, ""},
		{"no leader election ignores the lease flags", []string{"--exit-image", "e", "--leader-elect=false", "--leader-elect-name", "", "--leader-elect-retry-period", "0"}, ""},
		{"no exit image", nil, "--exit-image is required"},
		{"bad exit image", []string{"--exit-image", "not a valid image ref!!"}, `--exit-image "not a valid image ref!!"` + flagchecktest.ImageForm},
		{"empty exit command", append(base, "--exit-command", ""), `--exit-command "": want the command of --exit-image that exits 0, such as /exit0`},
		{"bad pod selector", append(base, "--pod-selector", "a in"), `--pod-selector "a in": want a label selector`},
		{"empty lease name", append(base, "--leader-elect-name", ""), "--leader-elect-name is empty: want a Lease name"},
		{"bad lease name", append(base, "--leader-elect-name", "Lease!"), `--leader-elect-name "Lease!": want a Lease name: `},
		{"empty lease namespace", append(base, "--leader-elect-namespace", ""), "--leader-elect-namespace is empty: want a namespace"},
		{"bad lease namespace", append(base, "--leader-elect-namespace", "a.b"), `--leader-elect-namespace "a.b": want a namespace: `},
		{"retry period 0", append(base, "--leader-elect-retry-period", "0"), "--leader-elect-retry-period 0s: want a positive duration such as 2s"},
		{"renew deadline within retry", append(base, "--leader-elect-renew-deadline", "2s"), "--leader-elect-renew-deadline 2s: want more than 1.2 x --leader-elect-retry-period (2s)"},
		{"lease within renew deadline", append(base, "--leader-elect-lease-duration", "10s"), "--leader-elect-lease-duration 10s: want more than --leader-elect-renew-deadline (10s)"},
	}, virtualNodeControllerCommand, webhookOptions.validateController)
}

// The commands validate in RunE, before they load a kubeconfig: the error is the flag's,
// not the missing file's.
func TestSubcommandsValidateBeforeClients(t *testing.T) {
	for _, tc := range []struct {
		cmd  *cobra.Command
		args []string
		want string
	}{
		{newSidecarWebhookCommand(), []string{"--wrapper-image", "w", "--exit-image", "e", "--cert-secret", "s", "--cert-namespace", "ns", "--cert-validity", "0"}, "--cert-validity 0s: want a positive duration such as 8760h"},
		{newVirtualNodeControllerCommand(), []string{"--exit-image", "e", "--leader-elect-namespace", "ns", "--leader-elect-name", ""}, "--leader-elect-name is empty: want a Lease name"},
		{newVirtualNodeControllerCommand(), []string{"--exit-image", "e", "--leader-elect-namespace", "ns", "--metrics-addr", ":0", "--metrics-max-inflight", "0"}, "--metrics-max-inflight 0: want at least 1"},
	} {
		tc.cmd.SetArgs(append(tc.args, "--kubeconfig", "/nonexistent/kubeconfig"))
		tc.cmd.SetOut(new(strings.Builder))
		tc.cmd.SetErr(new(strings.Builder))
		if err := tc.cmd.Execute(); err == nil || err.Error() != tc.want {
			t.Errorf("%s %q: %v, want %q", tc.cmd.Name(), tc.args, err, tc.want)
		}
	}
}

// An address the webhook command cannot serve on fails the start at once, naming the flag,
// before it makes a certificate or starts a server.
func TestSidecarWebhookListenAddr(t *testing.T) {
	// "" and a host alone would have net.Listen pick any port on every address.
	for _, addr := range []string{"notanaddr", "", "127.0.0.1", "127.0.0.1:"} {
		cmd := newSidecarWebhookCommand()
		cmd.SetArgs([]string{"--wrapper-image", "w", "--virtual-nodes=false", "--metrics-addr", "", "--listen-addr", addr})
		cmd.SetOut(new(strings.Builder))
		cmd.SetErr(new(strings.Builder))
		want := fmt.Sprintf("--listen-addr %q: want [host]:port, such as :9443", addr)
		if err := cmd.Execute(); err == nil || err.Error() != want {
			t.Errorf("--listen-addr %q: %v, want %q", addr, err, want)
		}
	}
}

// Certificate files that cannot be served fail the start, naming both flags.
func TestSidecarWebhookCertificateFiles(t *testing.T) {
	garbage := filepath.Join(t.TempDir(), "tls.crt")
	if err := os.WriteFile(garbage, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, files := range [][2]string{{"", ""}, {garbage, garbage}, {"/nonexistent/tls.crt", garbage}} {
		o := webhookOptions{certFile: files[0], keyFile: files[1]}
		_, err := o.servingCertificate(context.Background(), &sync.WaitGroup{}, logr.Discard())
		prefix := fmt.Sprintf("--tls-cert-file %q, --tls-key-file %q: ", files[0], files[1])
		if err == nil || !strings.HasPrefix(err.Error(), prefix) || !strings.HasSuffix(err.Error(), "want a PEM certificate and its PEM key (or --cert-secret, for a certificate the webhook makes itself)") {
			t.Errorf("%q: %v, want an error naming both flags and the accepted form", files, err)
		}
	}
}

// --version, a flag of the root command every command takes, prints the version and
// exits 0 there too, before any flag of the command is checked.
func TestSubcommandVersionFlag(t *testing.T) {
	for _, sub := range []string{"webhook", "sidecar-webhook", "virtual-node-controller"} {
		root := newRootCommand()
		var out strings.Builder
		root.SetOut(&out)
		root.SetArgs([]string{sub, "--version"})
		if err := root.Execute(); err != nil {
			t.Errorf("%s --version: %v", sub, err)
		} else if want := "sextant-sidecars dev\n"; out.String() != want {
			t.Errorf("%s --version printed %q, want %q", sub, out.String(), want)
		}
	}
}
