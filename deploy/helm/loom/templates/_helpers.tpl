{{/*
Names and labels. Objects are named after the release; the labels are the recommended
app.kubernetes.io set, and the selector labels are what the Service and the gateway's
InferencePool (deploy/gateway/inference-pool.yaml) select Loom's pods by.
*/}}
{{- define "loom.fullname" -}}
{{ .Release.Name }}
{{- end }}

{{- define "loom.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "loom.labels" -}}
{{ include "loom.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}
