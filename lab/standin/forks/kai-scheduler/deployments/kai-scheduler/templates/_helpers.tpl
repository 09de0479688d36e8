{{/* STAND-IN (lab only): helpers of the KAI-Scheduler fork chart. */}}

{{/*
A component's image tag: its own image.tag, then global.tag, then the chart's
appVersion. Usage: include "kai-scheduler.imageTag" (dict "root" $ "tag" .Values.binder.image.tag)
*/}}
{{- define "kai-scheduler.imageTag" -}}
{{- .tag | default .root.Values.global.tag | default .root.Chart.AppVersion -}}
{{- end -}}

{{/* The sharing mode, refused unless it is one of the allowed values (case-sensitive). */}}
{{- define "kai-scheduler.gpuSharingMode" -}}
{{- $allowed := list "Disabled" "NonMemoryEnforced" "HamiCore" "NvFractions" -}}
{{- $mode := .Values.global.gpuSharingMode | toString -}}
{{- if not (has $mode $allowed) -}}
{{- fail (printf "global.gpuSharingMode must be one of %s (case-sensitive), got %q" (join ", " $allowed) $mode) -}}
{{- end -}}
{{- $mode -}}
{{- end -}}

{{/* One service block of kai-config: service.{enabled,image}. */}}
{{- define "kai-scheduler.serviceSpec" -}}
service:
  enabled: {{ .enabled }}
  image:
    name: {{ .image.name }}
    repository: {{ .root.Values.global.registry }}
    tag: {{ include "kai-scheduler.imageTag" (dict "root" .root "tag" .image.tag) | quote }}
    pullPolicy: {{ .image.pullPolicy | default .root.Values.global.imagePullPolicy }}
{{- end -}}

{{/*
The kai-config Config the post-install hook applies (the operator's input):
spec.global.gpuSharingMode, spec.global.additionalImagePullSecrets and one
block per service with the image the operator deploys.
*/}}
{{- define "kai-scheduler.kai-config" -}}
apiVersion: kai.scheduler/v1
kind: Config
metadata:
  name: kai-config
spec:
  namespace: {{ .Release.Namespace }}
  global:
    gpuSharingMode: {{ include "kai-scheduler.gpuSharingMode" . }}
    {{- if .Values.global.imagePullSecrets }}
    additionalImagePullSecrets:
      {{- range .Values.global.imagePullSecrets }}
      - {{ .name }}
      {{- end }}
    {{- end }}
    {{- if .Values.global.nodeSelector }}
    nodeSelector:
      {{- toYaml .Values.global.nodeSelector | nindent 6 }}
    {{- end }}
    {{- if .Values.global.tolerations }}
    tolerations:
      {{- toYaml .Values.global.tolerations | nindent 6 }}
    {{- end }}
    replicaCount: {{ .Values.operator.replicaCount | default 1 }}
    queueLabelKey: {{ .Values.podgrouper.queueLabelKey | quote }}
  binder:
    {{- include "kai-scheduler.serviceSpec" (dict "root" . "enabled" .Values.binder.enabled "image" .Values.binder.image) | nindent 4 }}
    resourceReservation:
      namespace: {{ .Values.global.resourceReservation.namespace }}
      serviceAccountName: {{ .Values.global.resourceReservation.serviceAccount }}
      appLabel: {{ .Values.global.resourceReservation.appLabel }}
      {{- if .Values.binder.runtimeClassName }}
      runtimeClassName: {{ .Values.binder.runtimeClassName }}
      {{- end }}
      image:
        name: {{ .Values.binder.resourceReservationImage.name }}
        repository: {{ .Values.global.registry }}
        tag: {{ include "kai-scheduler.imageTag" (dict "root" $ "tag" .Values.binder.resourceReservationImage.tag) | quote }}
        pullPolicy: {{ .Values.binder.resourceReservationImage.pullPolicy | default .Values.global.imagePullPolicy }}
  podGrouper:
    {{- include "kai-scheduler.serviceSpec" (dict "root" . "enabled" .Values.podgrouper.enabled "image" .Values.podgrouper.image) | nindent 4 }}
  podGroupController:
    {{- include "kai-scheduler.serviceSpec" (dict "root" . "enabled" .Values.podgroupcontroller.enabled "image" .Values.podgroupcontroller.image) | nindent 4 }}
  queueController:
    {{- include "kai-scheduler.serviceSpec" (dict "root" . "enabled" .Values.queuecontroller.enabled "image" .Values.queuecontroller.image) | nindent 4 }}
  admission:
    {{- include "kai-scheduler.serviceSpec" (dict "root" . "enabled" .Values.admission.enabled "image" .Values.admission.image) | nindent 4 }}
    gpuFractionRuntimeClassName: {{ .Values.admission.gpuFractionRuntimeClassName | quote }}
  nodeScaleAdjuster:
    {{- include "kai-scheduler.serviceSpec" (dict "root" . "enabled" .Values.global.clusterAutoscaling "image" .Values.nodescaleadjuster.image) | nindent 4 }}
    args:
      nodeScaleNamespace: {{ .Values.nodescaleadjuster.scalingPodNamespace }}
  scheduler:
    {{- include "kai-scheduler.serviceSpec" (dict "root" . "enabled" .Values.scheduler.enabled "image" .Values.scheduler.image) | nindent 4 }}
{{- end -}}
