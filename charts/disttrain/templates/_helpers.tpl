{{- define "disttrain.labels" -}}
app.kubernetes.io/name: disttrain
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "disttrain.selector" -}}
app.kubernetes.io/name: disttrain
app.kubernetes.io/component: operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "disttrain.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (default "operator" .Values.nameOverride) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end }}

{{- define "disttrain.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "disttrain.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: with serviceAccount.create=false, name the ServiceAccount the operator runs as" .Values.serviceAccount.name -}}
{{- end -}}
{{- end }}
