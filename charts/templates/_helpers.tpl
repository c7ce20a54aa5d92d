{{/*
Names, labels, images and the security settings every workload shares.
*/}}

{{- define "easyvideor1.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "<release>-<chart>", or the release alone when it already holds the chart name. */}}
{{- define "easyvideor1.fullname" -}}
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

{{/*
Name of one component's objects: (dict "root" $ "component" "reward"). At most 52
characters: a StatefulSet's name must leave room for its controller-revision-hash label.
*/}}
{{- define "easyvideor1.componentName" -}}
{{- printf "%s-%s" (include "easyvideor1.fullname" .root | trunc (int (sub 51 (len .component))) | trimSuffix "-") .component }}
{{- end }}

{{- define "easyvideor1.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels: stable for the life of a release, so never the version. */}}
{{- define "easyvideor1.selectorLabels" -}}
app.kubernetes.io/name: {{ include "easyvideor1.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "easyvideor1.labels" -}}
helm.sh/chart: {{ include "easyvideor1.chart" .root }}
{{ include "easyvideor1.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: easyvideor1
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end }}

{{/* image: (dict "root" $ "image" .Values.reward.image); the tag defaults to appVersion. */}}
{{- define "easyvideor1.image" -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .root.Chart.AppVersion) }}
{{- end }}

{{- define "easyvideor1.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "easyvideor1.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* (dict "root" $ "indent" N): nothing at all when no pull secrets are set. */}}
{{- define "easyvideor1.imagePullSecrets" -}}
{{- with .root.Values.imagePullSecrets }}
{{- printf "imagePullSecrets:\n%s" (toYaml . | indent 2) | nindent $.indent }}
{{- end }}
{{- end }}

{{/*
Restricted Pod Security Standard. The uid is the one created in every image of docker/.
Pod level: (dict "seccomp" <profile or nil>).
*/}}
{{- define "easyvideor1.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  {{- toYaml (.seccomp | default (dict "type" "RuntimeDefault")) | nindent 2 }}
{{- end }}

{{- define "easyvideor1.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
{{- end }}

{{/* Caches and HOME on the writable /tmp instead of a read-only root. */}}
{{- define "easyvideor1.writableHomeEnv" -}}
- name: HOME
  value: /tmp
- name: XDG_CACHE_HOME
  value: /tmp/.cache
- name: HF_HOME
  value: /tmp/.cache/huggingface
{{- end }}

{{/* ---- Endpoints of the release's shared services ---- */}}

{{- define "easyvideor1.redisUrl" -}}
{{- if .Values.redis.enabled }}
{{- printf "redis://%s:6379/0" (include "easyvideor1.componentName" (dict "root" . "component" "redis")) }}
{{- else }}
{{- required "redis.external.url is required when redis.enabled is false" .Values.redis.external.url }}
{{- end }}
{{- end }}

{{- define "easyvideor1.s3Endpoint" -}}
{{- if .Values.minio.enabled }}
{{- printf "http://%s:9000" (include "easyvideor1.componentName" (dict "root" . "component" "minio")) }}
{{- else }}
{{- required "store.external.endpoint is required when minio.enabled is false" .Values.store.external.endpoint }}
{{- end }}
{{- end }}

{{/* Secret with AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY for the store. */}}
{{- define "easyvideor1.s3SecretName" -}}
{{- if .Values.minio.enabled }}
{{- default (include "easyvideor1.componentName" (dict "root" . "component" "s3")) .Values.minio.auth.existingSecret }}
{{- else }}
{{- required "store.external.existingSecret is required when minio.enabled is false" .Values.store.external.existingSecret }}
{{- end }}
{{- end }}

{{- define "easyvideor1.framesStore" -}}
{{- printf "s3://%s/%s" .Values.store.bucket .Values.store.framesPrefix }}
{{- end }}

{{- define "easyvideor1.weightsStore" -}}
{{- printf "s3://%s/%s" .Values.store.bucket .Values.store.weightsPrefix }}
{{- end }}

{{- define "easyvideor1.rewardUrl" -}}
{{- printf "http://%s:%v" (include "easyvideor1.componentName" (dict "root" . "component" "reward")) .Values.reward.service.port }}
{{- end }}

{{- define "easyvideor1.frameCacheUrl" -}}
{{- printf "http://%s:%v" (include "easyvideor1.componentName" (dict "root" . "component" "frame-cache")) .Values.frameCache.service.port }}
{{- end }}

{{/* Env of every pod that talks to the store. */}}
{{- define "easyvideor1.storeEnv" -}}
- name: EVR1_S3_ENDPOINT
  value: {{ include "easyvideor1.s3Endpoint" . | quote }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ include "easyvideor1.s3SecretName" . }}
      key: AWS_ACCESS_KEY_ID
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "easyvideor1.s3SecretName" . }}
      key: AWS_SECRET_ACCESS_KEY
{{- end }}

{{- define "easyvideor1.rewardTokenEnv" -}}
{{- if .Values.reward.auth.existingSecret }}
- name: EVR1_REWARD_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.reward.auth.existingSecret }}
      key: {{ .Values.reward.auth.secretKey }}
{{- end }}
{{- end }}

{{- define "easyvideor1.frameCacheTokenEnv" -}}
{{- if .Values.frameCache.auth.existingSecret }}
- name: EVR1_FRAME_CACHE_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.frameCache.auth.existingSecret }}
      key: {{ .Values.frameCache.auth.secretKey }}
{{- end }}
{{- end }}

{{/* Bearer tokens of the release's services, for the pods that call them. */}}
{{- define "easyvideor1.clientTokenEnv" -}}
{{- $parts := list (include "easyvideor1.rewardTokenEnv" . | trim) (include "easyvideor1.frameCacheTokenEnv" . | trim) }}
{{- join "\n" (compact $parts) }}
{{- end }}

{{/* Probes of the Ray pods: the raylet for liveness; the GCS too on the head. */}}
{{- define "easyvideor1.rayProbes" -}}
readinessProbe:
  httpGet:
    path: {{ if eq .role "head" }}/api/gcs_healthz{{ else }}/api/local_raylet_healthz{{ end }}
    port: {{ if eq .role "head" }}8265{{ else }}52365{{ end }}
  initialDelaySeconds: 10
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 12
livenessProbe:
  httpGet:
    path: /api/local_raylet_healthz
    port: 52365
  initialDelaySeconds: 30
  periodSeconds: 15
  timeoutSeconds: 5
  failureThreshold: 8
{{- end }}

{{/* Ray version installed in docker/rollout.Dockerfile and docker/trainer.Dockerfile. */}}
{{- define "easyvideor1.rayVersion" -}}
2.60.0
{{- end }}

{{/*
Names of KubeRay objects, at most 40 characters: KubeRay derives cluster, pod and Service
names from them that must stay within 63. (dict "root" $ "component" "trainer")
*/}}
{{- define "easyvideor1.rayName" -}}
{{- printf "%s-%s" (include "easyvideor1.fullname" .root | trunc (int (sub 39 (len .component))) | trimSuffix "-") .component }}
{{- end }}
