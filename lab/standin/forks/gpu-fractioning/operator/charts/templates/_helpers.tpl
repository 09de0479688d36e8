{{/* STAND-IN (lab only): helpers of the gpu-fractioning fork chart. */}}

{{- define "gpu-fractioning.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpu-fractioning.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpu-fractioning.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpu-fractioning.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-fractioning.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpu-fractioning.labels" -}}
helm.sh/chart: {{ include "gpu-fractioning.chart" . }}
{{ include "gpu-fractioning.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- define "gpu-fractioning.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpu-fractioning.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gpu-fractioning.daemonServiceAccountName" -}}
{{- if .Values.daemonServiceAccount.create }}
{{- default (printf "%s-daemon" (include "gpu-fractioning.fullname" .)) .Values.daemonServiceAccount.name }}
{{- else }}
{{- default "default" .Values.daemonServiceAccount.name }}
{{- end }}
{{- end }}

{{/* An image's tag: images.<name>.tag, else the chart's appVersion (not your build). */}}
{{- define "gpu-fractioning.imageTag" -}}
{{- .tag | default .root.Chart.AppVersion -}}
{{- end }}
