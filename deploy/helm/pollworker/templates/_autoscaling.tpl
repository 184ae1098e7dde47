{{/* Per-worker slot target: worker.maxPolls × autoscaling.targetSlotUtilization, at least 1. */}}
{{- define "pollworker.slotTarget" -}}
{{- max 1 (int (ceil (mulf .Values.worker.maxPolls .Values.autoscaling.targetSlotUtilization))) }}
{{- end }}

{{/* Label matchers of this release's workers in Prometheus. */}}
{{- define "pollworker.promSelector" -}}
{{- .Values.autoscaling.keda.selector | default (printf "namespace=%q,service=%q" .Release.Namespace (include "pollworker.fullname" .)) }}
{{- end }}

{{/* The autoscaler's behavior: scale out fast, in one worker at a time after a quiet window. */}}
{{- define "pollworker.scaleBehavior" -}}
scaleUp:
  stabilizationWindowSeconds: 0
  policies:
    - {type: Percent, value: 100, periodSeconds: {{ .Values.autoscaling.scaleUp.periodSeconds }}}
scaleDown:
  stabilizationWindowSeconds: {{ .Values.autoscaling.scaleDown.stabilizationWindowSeconds }}
  policies:
    - {type: Pods, value: 1, periodSeconds: {{ .Values.autoscaling.scaleDown.periodSeconds }}}
{{- end }}
