{{/*
The prepare step (prepare.enabled): `evr1 data prepare` of each prepare.data file into the
frame store, its manifest uploaded to prepare.out. The Job (prepare-job.yaml) writes the
manifests, the run config (_run-config.tpl) points data.train_files / data.val_files at them.
*/}}

{{- define "easyvideor1.prepareName" -}}
{{- include "easyvideor1.componentName" (dict "root" . "component" "prepare") }}
{{- end }}

{{/* The s3:// prefix the manifests go to (default: s3://<store.bucket>/prepared). */}}
{{- define "easyvideor1.prepareOut" -}}
{{- .Values.prepare.out | default (printf "s3://%s/prepared" .Values.store.bucket) | trimSuffix "/" }}
{{- end }}

{{/*
JSON list of {data, manifest} in prepare.data's order: the manifest of s3://b/x/train.jsonl
is <prepare.out>/train.jsonl (always JSONL, whatever the input's format). Two data files
with one name would overwrite each other's manifest: refused.
*/}}
{{- define "easyvideor1.prepareManifests" -}}
{{- $out := include "easyvideor1.prepareOut" . }}
{{- $seen := dict }}
{{- $items := list }}
{{- range .Values.prepare.data }}
{{- $file := base . }}
{{- $stem := trimSuffix (ext $file) $file }}
{{- if hasKey $seen $stem }}
{{- fail (printf "prepare.data: %s and %s would both be prepared into %s/%s.jsonl: give the data files different names" (get $seen $stem) . $out $stem) }}
{{- end }}
{{- $_ := set $seen $stem . }}
{{- $items = append $items (dict "data" . "manifest" (printf "%s/%s.jsonl" $out $stem)) }}
{{- end }}
{{- toJson $items }}
{{- end }}

{{/* The --model arguments: prepare.models, or the run config's policy model. */}}
{{- define "easyvideor1.prepareModels" -}}
{{- $models := .Values.prepare.models }}
{{- if not $models }}
{{- $models = list (dig "worker" "actor" "model_path" "" (.Values.runConfig | default dict)) }}
{{- end }}
{{- if not (first $models) }}
{{- fail "prepare.models is empty and runConfig.worker.actor.model_path is not set: name the model (one per family) whose processor sizes the frames and counts the prompt tokens" }}
{{- end }}
{{- toJson $models }}
{{- end }}

{{/*
The Helm hook phases. The Job must finish before the trainer RayJob of this revision is
created, so it runs pre-install / pre-upgrade: Helm applies the release's objects only once
it succeeded. The in-release MinIO is itself an object of the release, though, and does not
exist before the first install: then the Job runs post-install, and a trainer in the same
install would start before its manifest exists (refused in prepare-job.yaml).
*/}}
{{- define "easyvideor1.prepareHook" -}}
{{- if .Values.minio.enabled }}post-install{{ else }}pre-install{{ end }},pre-upgrade
{{- end }}
