{{/*
The labels of every object: the ones deploy/broker gives it, and Helm's.
*/}}
{{- define "tether.labels" -}}
app.kubernetes.io/name: tether-broker
app.kubernetes.io/component: broker
app.kubernetes.io/part-of: tether
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}
