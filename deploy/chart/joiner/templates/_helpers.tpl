{{/* The release's full name, cut to 63 characters. */}}
{{- define "joiner.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "joiner.serviceAccountName" -}}
{{- default (include "joiner.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "joiner.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "joiner.labels" -}}
{{ include "joiner.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "joiner.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
{{- end -}}

{{/* `joiner run` flags from the settings block; fails on settings that cannot work. */}}
{{- define "joiner.args" -}}
{{- $s := .Values.settings -}}
{{- if not (has $s.provider (list "kwok" "aws" "gcp" "azure")) -}}
{{- fail (printf "settings.provider must be kwok, aws, gcp or azure, got %q" $s.provider) -}}
{{- end -}}
{{- if and (has $s.provider (list "aws" "gcp" "azure")) (not $s.clusterName) -}}
{{- fail (printf "settings.clusterName is required with settings.provider=%s (instances are tagged with it)" $s.provider) -}}
{{- end -}}
- --provider={{ $s.provider }}
{{- if $s.clusterName }}
- --cluster-name={{ $s.clusterName }}
{{- end }}
{{- if $s.region }}
- --region={{ $s.region }}
{{- end }}
{{- if $s.interruptionQueue }}
- --interruption-queue={{ $s.interruptionQueue }}
{{- end }}
{{- if $s.interruptionSubscription }}
- --interruption-subscription={{ $s.interruptionSubscription }}
{{- end }}
- --leader-elect-namespace={{ .Release.Namespace }}
- --metrics-port={{ .Values.service.port }}
- --health-port={{ .Values.healthPort }}
- --batch-idle-duration={{ $s.batchIdleDuration }}
- --batch-max-duration={{ $s.batchMaxDuration }}
- --launch-timeout={{ $s.launchTimeout }}
- --registration-timeout={{ $s.registrationTimeout }}
- --initialization-timeout={{ $s.initializationTimeout }}
- --gang-timeout={{ $s.gangTimeout }}
- --disruption-poll-interval={{ $s.disruptionPollInterval }}
- --log-level={{ $s.logLevel }}
- --log-format={{ $s.logFormat }}
- {{ if $s.features.nominate }}--nominate{{ else }}--no-nominate{{ end }}
- {{ if $s.features.reserve }}--reserve{{ else }}--no-reserve{{ end }}
- {{ if $s.features.planUntried }}--plan-untried{{ else }}--no-plan-untried{{ end }}
{{- if $s.prometheusUrl }}
- --prometheus-url={{ $s.prometheusUrl }}
{{- end }}
{{- $pr := .Values.provisioningRequests }}
{{- if eq (toString $pr.serve) "true" }}
- --provisioning-requests
{{- else if eq (toString $pr.serve) "false" }}
- --no-provisioning-requests
{{- end }}
{{- if ne (toString $pr.bookingDuration) "600" }}
- --provisioning-request-booking={{ $pr.bookingDuration }}
{{- end }}
{{- range $s.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}
