{{/* Common labels for every object of the release. */}}
{{- define "sextant.labels" -}}
app.kubernetes.io/name: sextant
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{/* The image of a sextant component: include "sextant.image" (list . "sextant-agent") */}}
{{- define "sextant.image" -}}
{{- $root := index . 0 -}}
{{- printf "%s/%s:%s" $root.Values.image.repository (index . 1) (default $root.Chart.AppVersion $root.Values.image.tag) -}}
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

{{/*
The webhook's CA and serving certificate, base64-encoded, as YAML (ca, cert, key): those
of the existing Secret when there is one (so upgrades keep them), else new ones. Helm
renders each inclusion anew and genCA is random, so it is included once, in
webhook-admission.yaml, which holds the Secret and both webhook configurations.
*/}}
{{- define "sextant.webhookTLS" -}}
{{- $secret := lookup "v1" "Secret" .Release.Namespace "sextant-webhook-tls" -}}
{{- if and $secret $secret.data (index $secret.data "ca.crt") (index $secret.data "tls.crt") (index $secret.data "tls.key") -}}
ca: {{ index $secret.data "ca.crt" }}
cert: {{ index $secret.data "tls.crt" }}
key: {{ index $secret.data "tls.key" }}
{{- else -}}
{{- $svc := printf "sextant-webhook.%s.svc" .Release.Namespace -}}
{{- $days := int .Values.webhook.certValidityDays -}}
{{- $ca := genCA "sextant-webhook-ca" $days -}}
{{- $cert := genSignedCert $svc nil (list "sextant-webhook" (printf "sextant-webhook.%s" .Release.Namespace) $svc (printf "%s.cluster.local" $svc)) $days $ca -}}
ca: {{ $ca.Cert | b64enc }}
cert: {{ $cert.Cert | b64enc }}
key: {{ $cert.Key | b64enc }}
{{- end -}}
{{- end -}}
