{{/* The chart's name, or nameOverride. */}}
{{- define "pollworker.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Objects' name: fullnameOverride, or release-chart (release alone when it contains the chart's name). */}}
{{- define "pollworker.fullname" -}}
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

{{/* Labels of every object but the selector's. */}}
{{- define "pollworker.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: pollworker
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
{{- end }}

{{/* Labels of the workers' objects. */}}
{{- define "pollworker.labels" -}}
{{ include "pollworker.commonLabels" . }}
{{ include "pollworker.selectorLabels" . }}
{{- end }}

{{/* Labels of the sessions objects: another name, so that the workers' selector never selects their pods. */}}
{{- define "pollworker.sessionsLabels" -}}
{{ include "pollworker.commonLabels" . }}
app.kubernetes.io/name: {{ include "pollworker.name" . }}-sessions
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The workers' selector. */}}
{{- define "pollworker.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pollworker.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "pollworker.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The Secret holding the Redis URL: the chart's own when redis.url is set, else redis.existingSecret. */}}
{{- define "pollworker.redisSecret" -}}
{{- if .Values.redis.url }}
{{- include "pollworker.fullname" . }}-redis
{{- else if .Values.redis.existingSecret }}
{{- .Values.redis.existingSecret }}
{{- else }}
{{- fail "redis: set redis.existingSecret (a Secret holding the Redis URL) or redis.url" }}
{{- end }}
{{- end }}

{{/* The env entry of the Redis URL, shared by the workers and the sessions pods. */}}
{{- define "pollworker.redisEnv" -}}
- name: POLLWORKER_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "pollworker.redisSecret" . }}
      key: {{ .Values.redis.secretKey }}
{{- end }}

{{/* The ConfigMap holding the sessions file; empty when there is none. */}}
{{- define "pollworker.sessionsConfigMap" -}}
{{- if .Values.sessions.existingConfigMap }}
{{- .Values.sessions.existingConfigMap }}
{{- else if .Values.sessions.file }}
{{- include "pollworker.fullname" . }}-sessions
{{- end }}
{{- end }}

{{/* The pod spec of one `pollworker sessions apply` run (hook Job and CronJob alike). */}}
{{- define "pollworker.sessionsPod" -}}
metadata:
  labels:
    {{- include "pollworker.sessionsLabels" . | nindent 4 }}
spec:
  restartPolicy: Never
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  containers:
    - name: apply
      image: {{ include "pollworker.image" . }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args:
        - sessions
        - apply
        - -f
        - /etc/pollworker/sessions/{{ .Values.sessions.key }}
        {{- if .Values.sessions.prune }}
        - --prune
        {{- end }}
      env:
        {{- include "pollworker.redisEnv" . | nindent 8 }}
        - name: POLLWORKER_TIMEOUT
          value: {{ printf "%ds" (int .Values.sessions.timeoutSeconds) | quote }}
      volumeMounts:
        - name: sessions
          mountPath: /etc/pollworker/sessions
          readOnly: true
      resources:
        {{- toYaml .Values.sessions.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
  volumes:
    - name: sessions
      configMap:
        name: {{ include "pollworker.sessionsConfigMap" . }}
{{- end }}

{{/* Refuses values that would break the drain or the leases. */}}
{{- define "pollworker.validate" -}}
{{- $w := .Values.worker }}
{{- $need := add (int $w.preStopSeconds) (int $w.drainTimeoutSeconds) 5 }}
{{- if lt (int .Values.terminationGracePeriodSeconds) (int $need) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be at least worker.preStopSeconds + worker.drainTimeoutSeconds + 5 (%d): the pod would be killed mid-drain, before its leases are released" (int .Values.terminationGracePeriodSeconds) (int $need)) }}
{{- end }}
{{- if lt (int $w.leaseTTLSeconds) 3 }}
{{- fail "worker.leaseTTLSeconds must be at least 3 (3 × the renew interval of 1 s)" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled (not .Values.service.enabled) }}
{{- fail "serviceMonitor.enabled needs service.enabled" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (or (eq (toString .Values.worker.maxPolls) "off") (lt (int .Values.worker.maxPolls) 1)) }}
{{- fail "autoscaling needs worker.maxPolls >= 1: its target is a share of the poll slots" }}
{{- end }}
{{- end }}
