{{/*
Pod template of a trainer Ray pod: (dict "root" $ "role" "head|worker" "cpu" N "memory" Q "gpus" N).
*/}}
{{- define "easyvideor1.trainerPod" -}}
{{- $root := .root }}
{{- $t := $root.Values.trainer -}}
metadata:
  labels:
    {{- include "easyvideor1.labels" (dict "root" $root "component" "trainer") | nindent 4 }}
    easyvideor1.io/ray-role: {{ .role }}
  annotations:
    {{- include "easyvideor1.runConfigChecksum" $root | nindent 4 }}
spec:
  automountServiceAccountToken: false
  {{- with $t.serviceAccountName }}
  serviceAccountName: {{ . }}
  {{- end }}
  {{- include "easyvideor1.imagePullSecrets" (dict "root" $root "indent" 2) }}
  securityContext:
    {{- include "easyvideor1.podSecurityContext" dict | nindent 4 }}
  containers:
    - name: ray-{{ .role }}
      image: {{ include "easyvideor1.image" (dict "root" $root "image" $t.image) }}
      imagePullPolicy: {{ $t.image.pullPolicy }}
      env:
        {{- include "easyvideor1.writableHomeEnv" $root | nindent 8 }}
        {{- include "easyvideor1.storeEnv" $root | nindent 8 }}
        {{- with include "easyvideor1.clientTokenEnv" $root | trim }}{{ . | nindent 8 }}{{ end }}
      ports:
        {{- if eq .role "head" }}
        - {name: gcs-server, containerPort: 6379}
        - {name: dashboard, containerPort: 8265}
        - {name: client, containerPort: 10001}
        {{- end }}
        - {name: metrics, containerPort: 8080}
      {{- include "easyvideor1.rayProbes" (dict "role" .role) | nindent 6 }}
      resources:
        requests:
          cpu: {{ .cpu | quote }}
          memory: {{ .memory | quote }}
          {{- if gt (int .gpus) 0 }}
          nvidia.com/gpu: {{ .gpus | quote }}
          {{- end }}
        limits:
          cpu: {{ .cpu | quote }}
          memory: {{ .memory | quote }}
          {{- if gt (int .gpus) 0 }}
          nvidia.com/gpu: {{ .gpus | quote }}
          {{- end }}
      securityContext:
        {{- include "easyvideor1.containerSecurityContext" $root | nindent 8 }}
      volumeMounts:
        {{- include "easyvideor1.runConfigMount" $root | nindent 8 }}
        - {name: tmp, mountPath: /tmp}
        - {name: dshm, mountPath: /dev/shm}
  volumes:
    {{- include "easyvideor1.runConfigVolume" $root | nindent 4 }}
    - name: tmp
      emptyDir: {}
    - name: dshm
      emptyDir: {medium: Memory, sizeLimit: {{ $t.shmSize | quote }}}
  {{- if gt (int .gpus) 0 }}
  {{- with $t.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- end }}
{{- end }}
