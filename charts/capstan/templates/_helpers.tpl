{{/* The release's full name, within 63 characters. */}}
{{- define "capstan.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "capstan.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "capstan.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the controller's pods. */}}
{{- define "capstan.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "capstan.labels" -}}
{{ include "capstan.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* FEATURE_GATES from settings.featureGates (camelCase keys to Karpenter's gate names). */}}
{{- define "capstan.featureGates" -}}
{{- $gates := list -}}
{{- range $k, $v := .Values.settings.featureGates -}}
{{- $gates = append $gates (printf "%s%s=%t" (upper (substr 0 1 $k)) (substr 1 (len $k) $k) $v) -}}
{{- end -}}
{{- join "," $gates -}}
{{- end -}}
