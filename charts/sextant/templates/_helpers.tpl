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
