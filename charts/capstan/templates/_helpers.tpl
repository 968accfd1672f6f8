{{/* The chart's name, or nameOverride. */}}
{{- define "capstan.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name, within 63 characters, or fullnameOverride. */}}
{{- define "capstan.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "capstan.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
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
app.kubernetes.io/name: {{ include "capstan.name" . }}
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

{{/* Karpenter's settings that Capstan cannot honour at other values than these: refused, with why. */}}
{{- define "capstan.refusals" -}}
{{- if contains "karpenter" .Values.controller.image.repository }}{{ fail (printf "controller.image.repository=%s is refused: it names Karpenter's image; set it to Capstan's image (make release REGISTRY=… pushes one; docs/install.md), or install the released chart, which names its image" .Values.controller.image.repository) }}{{ end -}}
{{- if not .Values.controller.image.repository }}{{ fail "controller.image.repository is required: no Capstan image is published; build and push one with make release REGISTRY=host/path (docs/install.md, \"Publishing a release\") and install the chart it pushes, or set controller.image.repository (and controller.image.digest) to that image" }}{{ end -}}
{{- $s := .Values.settings -}}
{{- if and $s.replaceOnRebalanceRecommendation (not $s.interruptionQueue) }}{{ fail "settings.replaceOnRebalanceRecommendation=true needs settings.interruptionQueue: rebalance recommendations arrive on the interruption queue" }}{{ end -}}
{{- if $s.enableZonalShift }}{{ fail "settings.enableZonalShift=true is refused: Capstan does not read EKS zonal shifts yet" }}{{ end -}}
{{- if $s.enableDRA }}{{ fail "settings.enableDRA=true is refused: Capstan does not model DRA devices" }}{{ end -}}
{{- if eq (toString $s.ignoreDRARequests) "false" }}{{ fail "settings.ignoreDRARequests=false is refused: Capstan does not simulate DRA devices and plans nothing for pods with DRA requirements (IGNORE_DRA_REQUESTS=true)" }}{{ end -}}
{{- if $s.legacyNodeRepair }}{{ fail "settings.legacyNodeRepair=true is refused: Capstan's node repair is the disruption method the nodeRepair feature gate turns on; the legacy node.health controller is not implemented" }}{{ end -}}
{{- if $s.disableClusterStateObservability }}{{ fail "settings.disableClusterStateObservability=true is refused: Capstan's cluster-state metrics and events cannot be turned off" }}{{ end -}}
{{- range $k, $v := $s.awsFeatureGates }}
{{- if $v }}{{ fail (printf "settings.awsFeatureGates.%s=true is refused: Capstan does not implement it" $k) }}{{ end -}}
{{- end -}}
{{- end -}}
