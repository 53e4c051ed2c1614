{{/* Common labels for every object of the release. */}}
{{- define "sextant.labels" -}}
app.kubernetes.io/name: sextant
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{/*
The image of a sextant component, by its key under image (agent, ranker, sidecars, sidecarWrapper,
exit0): include "sextant.image" (list . "agent"). registry/repository:tag, or
registry/repository@digest when the image has a digest; the image's registry and tag
default to image.registry and image.tag, the tag to the chart's appVersion.
*/}}
{{- define "sextant.image" -}}
{{- $root := index . 0 -}}
{{- $img := index $root.Values.image (index . 1) -}}
{{- $registry := default $root.Values.image.registry $img.registry -}}
{{- $name := $img.repository -}}
{{- if $registry }}{{ $name = printf "%s/%s" (trimSuffix "/" $registry) $img.repository }}{{ end -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $name $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $name (default (default $root.Chart.AppVersion $root.Values.image.tag) $img.tag) -}}
{{- end -}}
{{- end -}}

{{/* The pod spec's imagePullSecrets, from the value imagePullSecrets. */}}
{{- define "sextant.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets -}}
imagePullSecrets:
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end -}}

{{/*
The pod spec's priorityClassName: include "sextant.priorityClassName" (list . NAME KIND),
KIND node or cluster. NAME if set, else sextant-KIND-critical when the chart creates its
PriorityClasses, else none.
*/}}
{{- define "sextant.priorityClassName" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- if and (not $name) $root.Values.priorityClasses.create }}{{ $name = printf "sextant-%s-critical" (index . 2) }}{{ end -}}
{{- with $name -}}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{/* Env that points in-cluster clients at the API server when apiServer is set. */}}
{{- define "sextant.apiServerEnv" -}}
{{- if .Values.apiServer.host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ .Values.apiServer.host | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ required "apiServer.port is required with apiServer.host" .Values.apiServer.port | quote }}
{{- end }}
{{- end -}}

{{/* cert-manager's CA injection annotation of the webhook configurations (certManager TLS). */}}
{{- define "sextant.webhookCAInjection" -}}
{{- if eq .Values.webhook.tls.mode "certManager" }}
annotations:
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/sextant-webhook
{{- end }}
{{- end -}}

{{/*
The ranker's Go GC environment: GOGC from ranker.gc.percent, and GOMEMLIMIT in bytes,
ranker.gc.memoryLimitPercent of ranker.resources.limits.memory (none when either is
unset or 0). A memory limit this cannot read fails the install, naming it.
*/}}
{{- define "sextant.rankerGCEnv" -}}
- name: GOGC
  value: {{ .Values.ranker.gc.percent | int | toString | quote }}
{{- $limit := "" }}
{{- with .Values.ranker.resources }}{{ with .limits }}{{ with .memory }}{{ $limit = toString . }}{{ end }}{{ end }}{{ end }}
{{- $percent := .Values.ranker.gc.memoryLimitPercent | int }}
{{- if and $limit (gt $percent 0) }}
{{- if not (regexMatch "^[0-9]+(Ki|Mi|Gi|Ti|k|M|G|T)?$" $limit) }}
{{- fail (printf "ranker.resources.limits.memory %q: want an integer of bytes with an optional suffix Ki, Mi, Gi, Ti, k, M, G or T (e.g. 1Gi or 1500Mi), from which ranker.gc.memoryLimitPercent sets GOMEMLIMIT" $limit) }}
{{- end }}
{{- $digits := regexFind "^[0-9]+" $limit }}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 }}
- name: GOMEMLIMIT
  value: {{ div (mul (atoi $digits) (get $units (trimPrefix $digits $limit)) $percent) 100 | toString | quote }}
{{- end }}
{{- end -}}

{{/*
A Go duration (as time.ParseDuration takes it: 1m30s, 500ms, 2h, 1.5h) in seconds, for
comparing durations: float64 (include "sextant.durationSeconds" "1m30s") is 90. Summed
in nanoseconds, integers in a float64 up to 104 days, so equal durations compare equal
however they are written (30s, 30000ms).
*/}}
{{- define "sextant.durationSeconds" -}}
{{- $d := toString . -}}
{{- $unit := "(ns|us|µs|ms|s|m|h)" -}}
{{- if not (regexMatch (printf "^([0-9]+(\\.[0-9]+)?%s)+$" $unit) $d) -}}
{{- fail (printf "%q is not a duration: want a Go duration such as 1m30s, 500ms or 2h" $d) -}}
{{- end -}}
{{- $ns := dict "ns" 1.0 "us" 1000.0 "µs" 1000.0 "ms" 1000000.0 "s" 1000000000.0 "m" 60000000000.0 "h" 3600000000000.0 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll (printf "[0-9]+(\\.[0-9]+)?%s" $unit) $d -1 -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . -}}
{{- $total = addf $total (mulf (float64 $number) (get $ns (trimPrefix $number .))) -}}
{{- end -}}
{{- divf $total 1000000000.0 -}}
{{- end -}}

{{/*
A list as one comma-separated flag value that pflag's StringSlice (CSV) parses back to
the same list: an element with a comma, a double quote or a line break is quoted, its
double quotes doubled.
*/}}
{{- define "sextant.csv" -}}
{{- $out := list -}}
{{- range . -}}
{{- if regexMatch "[,\"\r\n]" . -}}
{{- $out = append $out (printf "\"%s\"" (replace "\"" "\"\"" .)) -}}
{{- else -}}
{{- $out = append $out . -}}
{{- end -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{/*
"true" when the virtual-node controller runs: webhook.enabled, webhook.virtualNodes and
at least one replica. Its Deployment, account, RBAC, metrics and the pod policy's
allowance for it follow this.
*/}}
{{- define "sextant.virtualNodeController" -}}
{{- if and .Values.webhook.enabled .Values.webhook.virtualNodes (gt (int .Values.webhook.virtualNodeReplicas) 0) }}true{{ end -}}
{{- end -}}

{{/*
Combinations of values that the schema cannot refuse and the components would refuse
at startup, or run badly with: each fails the install, naming the values and what to
set. Rendered by validate.yaml.
*/}}
{{- define "sextant.validate" -}}
{{- $v := .Values -}}
{{- $secs := dict -}}
{{- if $v.agent.enabled -}}
{{- range list "sampleInterval" "window" "reportMinInterval" "reportMaxInterval" -}}
{{- $_ := set $secs . (float64 (include "sextant.durationSeconds" (index $v.agent .))) -}}
{{- end -}}
{{- if lt $secs.window $secs.sampleInterval -}}
{{- fail (printf "agent.window %s is shorter than agent.sampleInterval %s: the peak is taken over a window of samples; set agent.window to agent.sampleInterval or more" $v.agent.window $v.agent.sampleInterval) -}}
{{- end -}}
{{- if lt $secs.reportMaxInterval $secs.reportMinInterval -}}
{{- fail (printf "agent.reportMaxInterval %s is shorter than agent.reportMinInterval %s: set agent.reportMaxInterval to agent.reportMinInterval or more" $v.agent.reportMaxInterval $v.agent.reportMinInterval) -}}
{{- end -}}
{{- range $v.agent.enforcement.networks -}}
{{- if and (ne . "pod") (not (hasKey $v.agent.networks .)) -}}
{{- fail (printf "agent.enforcement.networks names %q, which is not a network of the nodes: want pod, or a name of agent.networks" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $v.ranker.enabled -}}
{{- $le := $v.ranker.leaderElection -}}
{{- if $le.enabled -}}
{{- $lease := float64 (include "sextant.durationSeconds" $le.leaseDuration) -}}
{{- $renew := float64 (include "sextant.durationSeconds" $le.renewDeadline) -}}
{{- $retry := float64 (include "sextant.durationSeconds" $le.retryPeriod) -}}
{{- if le $lease $renew -}}
{{- fail (printf "ranker.leaderElection.leaseDuration %s is not longer than ranker.leaderElection.renewDeadline %s, which kube-scheduler refuses: set leaseDuration above renewDeadline (the defaults are 15s and 10s)" $le.leaseDuration $le.renewDeadline) -}}
{{- end -}}
{{- /* client-go's leader election wants renewDeadline > retryPeriod * 1.2 (its JitterFactor). */ -}}
{{- if le $renew (mulf $retry 1.2) -}}
{{- fail (printf "ranker.leaderElection.renewDeadline %s is not longer than 1.2 x ranker.leaderElection.retryPeriod %s, which kube-scheduler refuses: set renewDeadline above 1.2 x retryPeriod (the defaults are 10s and 2s)" $le.renewDeadline $le.retryPeriod) -}}
{{- end -}}
{{- else if gt (int $v.ranker.replicas) 1 -}}
{{- fail (printf "ranker.replicas %d with ranker.leaderElection.enabled=false runs %d active schedulers, each reserving bandwidth, NUMA nodes and devices without seeing the others': set ranker.leaderElection.enabled=true, or ranker.replicas=1" (int $v.ranker.replicas) (int $v.ranker.replicas)) -}}
{{- end -}}
{{- $reduce := float64 (include "sextant.durationSeconds" $v.ranker.bandwidth.notStarted.reduceAfter) -}}
{{- $release := float64 (include "sextant.durationSeconds" $v.ranker.bandwidth.notStarted.releaseAfter) -}}
{{- if and (gt $reduce 0.0) (gt $release 0.0) (lt $release $reduce) -}}
{{- fail (printf "ranker.bandwidth.notStarted.releaseAfter %s is shorter than reduceAfter %s, which the ranker refuses: set releaseAfter to reduceAfter or longer (the defaults are 5m and 2m), or either to 0s for never" $v.ranker.bandwidth.notStarted.releaseAfter $v.ranker.bandwidth.notStarted.reduceAfter) -}}
{{- end -}}
{{- if $v.agent.enabled -}}
{{- if le (float64 (include "sextant.durationSeconds" $v.ranker.bandwidth.staleAfter)) $secs.reportMaxInterval -}}
{{- fail (printf "ranker.bandwidth.staleAfter %s is not longer than agent.reportMaxInterval %s: a quiet node's NodeBandwidth, rewritten only every reportMaxInterval, goes stale between writes and the node takes no pod that requires bandwidth; set ranker.bandwidth.staleAfter above agent.reportMaxInterval (e.g. twice it)" $v.ranker.bandwidth.staleAfter $v.agent.reportMaxInterval) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $v.webhook.enabled (eq (int $v.webhook.replicas) 0) (eq $v.webhook.failurePolicy "Fail") -}}
{{- fail "webhook.replicas 0 with webhook.failurePolicy Fail refuses every pod created in the namespaces the webhook selects: set webhook.replicas to 1 or more, or webhook.failurePolicy to Ignore" -}}
{{- end -}}
{{- end -}}
