{{/* Common labels for every object of the release. */}}
{{- define "sextant.labels" -}}
app.kubernetes.io/name: sextant
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{/*
The image of a sextant component, by its key under image (agent, ranker, sidecarWrapper,
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
