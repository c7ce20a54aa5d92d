{{/*
The run config of the release: ONE file, `run.yaml` of the ConfigMap "<release>-run-config",
mounted read-only at /etc/easyvideor1 into every pod that runs easyvideor1 code (reward,
frame-cache, the rollout RayService's head and workers, the trainer RayJob's head and
workers). Every command reads its settings from it: `evr1 serve reward --config FILE`,
`evr1 serve frame-cache --config FILE`, build_app {config: FILE}, the trainer entrypoint.

Three layers, later ones winning (sprig mergeOverwrite, deep):
  1. what the release provides: its Redis, S3 stores, service URLs, the trainer image;
  2. .Values.runConfig (docs/config.md; values.yaml carries the chart's defaults there);
  3. what the objects of this release require: servers bind 0.0.0.0, token_env matches the
     Secret env the chart sets, kubernetes.* describes the trainer RayJob rendered here, and
     with prepare.enabled data.train_files / data.val_files are the prepared manifests.
*/}}

{{- define "easyvideor1.runConfigName" -}}
{{- include "easyvideor1.componentName" (dict "root" . "component" "run-config") }}
{{- end }}

{{/* Where the ConfigMap is mounted, and the file every command is given. */}}
{{- define "easyvideor1.runConfigDir" -}}
/etc/easyvideor1
{{- end }}

{{- define "easyvideor1.runConfigPath" -}}
/etc/easyvideor1/run.yaml
{{- end }}

{{/*
Chart values that were settings of the run config and now live under runConfig: a clear
error instead of a value that would silently do nothing.
*/}}
{{- define "easyvideor1.checkRemovedValues" -}}
{{- $moved := list
  (list "trainer" "runConfig" "runConfig (top level; one run config for every component)")
  (list "reward" "workers" "runConfig.worker.reward.workers")
  (list "reward" "itemTimeoutSeconds" "runConfig.worker.reward.timeout_s")
  (list "reward" "maxBatch" "runConfig.serve.reward.max_batch")
  (list "frameCache" "queueNamespace" "runConfig.serve.frame_cache.namespace")
  (list "rollout" "modelPath" "runConfig.worker.actor.model_path")
  (list "rollout" "maxModelLen" "runConfig.data.max_prompt_length and runConfig.data.max_response_length (the engines' length) and runConfig.worker.rollout.*")
  (list "rollout" "batchSize" "runConfig.serve.rollout.batch_size")
  (list "rollout" "gpusPerReplica" "runConfig.serve.rollout.num_gpus")
  (list "rollout" "cpusPerReplica" "runConfig.serve.rollout.num_cpus")
  (list "rollout" "autoscaling" "runConfig.serve.rollout.min_replicas, max_replicas and tasks_per_replica")
  (list "rollout" "deploymentName" "nothing: the rollout pool names its Serve deployment itself") }}
{{- range $moved }}
{{- $section := index $.Values (index . 0) | default dict }}
{{- if hasKey $section (index . 1) }}
{{- fail (printf "%s.%s was removed from the chart's values: set %s instead (charts/README.md, \"The run config\")" (index . 0) (index . 1) (index . 2)) }}
{{- end }}
{{- end }}
{{- if hasKey .Values "runNamespace" }}
{{- fail "runNamespace was removed from the chart's values: set runConfig.distributed.namespace instead (charts/README.md, \"The run config\")" }}
{{- end }}
{{- end }}

{{/* The merged run config as YAML (the ConfigMap's run.yaml, and its checksum). */}}
{{- define "easyvideor1.runConfig" -}}
{{- include "easyvideor1.checkRemovedValues" . }}
{{- $v := .Values }}
{{- $t := $v.trainer }}
{{- $trainerImage := include "easyvideor1.image" (dict "root" . "image" $t.image) }}
{{- /* 1. What the release provides. */}}
{{- $release := dict
  "distributed" (dict
    "mode" "distributed"
    "queue_url" (include "easyvideor1.redisUrl" .)
    "weights_store" (include "easyvideor1.weightsStore" .))
  "data" (dict "frame_cache" (dict "store" (include "easyvideor1.framesStore" .)))
  "worker" (dict "reward" dict)
  "serve" (dict "frame_cache" (dict "queue_url" (include "easyvideor1.redisUrl" .)))
  "kubernetes" (dict "image" $trainerImage "namespace" .Release.Namespace) }}
{{- if $v.reward.enabled }}
{{- $_ := set $release.worker.reward "url" (include "easyvideor1.rewardUrl" .) }}
{{- end }}
{{- if $v.frameCache.enabled }}
{{- $_ := set $release.distributed "frame_cache_url" (include "easyvideor1.frameCacheUrl" .) }}
{{- end }}
{{- if $v.prepare.enabled }}
{{- /* A prepared manifest's media are in the store already: nothing to build from raw files. */}}
{{- $_ := set $release.data.frame_cache "build_before_training" false }}
{{- end }}
{{- /* 3. What the objects of this release require. */}}
{{- $reward := dict "host" "0.0.0.0" }}
{{- if $v.reward.auth.existingSecret }}
{{- $_ := set $reward "token_env" "EVR1_REWARD_TOKEN" }}
{{- end }}
{{- $frameCache := dict "host" "0.0.0.0" }}
{{- if $v.frameCache.auth.existingSecret }}
{{- $_ := set $frameCache "token_env" "EVR1_FRAME_CACHE_TOKEN" }}
{{- end }}
{{- $required := dict "serve" (dict "reward" $reward "frame_cache" $frameCache "rollout" (dict "http_host" "0.0.0.0")) }}
{{- if $v.prepare.enabled }}
{{- /* Training reads what the prepare Job writes: the first data file is the training set,
       the second (when given) the validation set. */}}
{{- $manifests := include "easyvideor1.prepareManifests" . | fromJsonArray }}
{{- $data := dict }}
{{- with $manifests }}
{{- $_ := set $data "train_files" (index . 0).manifest }}
{{- end }}
{{- if gt (len $manifests) 1 }}
{{- $_ := set $data "val_files" (index $manifests 1).manifest }}
{{- end }}
{{- $_ := set $required "data" $data }}
{{- end }}
{{- $run := mergeOverwrite $release (deepCopy ($v.runConfig | default dict)) $required }}
{{- if $t.enabled }}
{{- /* kubernetes.* describes the RayJob of this release, so the trainer values replace it whole. */}}
{{- $k8s := dict
  "image" $trainerImage
  "namespace" .Release.Namespace
  "num_workers" $t.numWorkers
  "gpus_per_worker" $t.gpusPerWorker
  "cpus_per_worker" $t.cpusPerWorker
  "memory_per_worker" $t.memoryPerWorker
  "head_cpus" $t.headCpus
  "head_memory" $t.headMemory
  "ttl_seconds_after_finished" $t.ttlSecondsAfterFinished }}
{{- if $t.serviceAccountName }}
{{- $_ := set $k8s "service_account" $t.serviceAccountName }}
{{- end }}
{{- $_ := set $run "kubernetes" $k8s }}
{{- end }}
{{- toYaml $run }}
{{- end }}

{{/*
Pod template annotation: pods restart when the run config changes. The SHA-256 of the
ConfigMap's run.yaml exactly (its block scalar ends in one newline), as `evr1 k8s render-job`
writes it too.
*/}}
{{- define "easyvideor1.runConfigChecksum" -}}
checksum/run-config: {{ printf "%s\n" (include "easyvideor1.runConfig" .) | sha256sum }}
{{- end }}

{{- define "easyvideor1.runConfigVolume" -}}
- name: run-config
  configMap:
    name: {{ include "easyvideor1.runConfigName" . }}
{{- end }}

{{- define "easyvideor1.runConfigMount" -}}
- name: run-config
  mountPath: {{ include "easyvideor1.runConfigDir" . }}
  readOnly: true
{{- end }}
