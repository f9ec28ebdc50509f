{{/* The release's resource name: the release name, unless it already says cairn. */}}
{{- define "cairn.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "cairn.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cairn.labels" -}}
{{ include "cairn.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "cairn.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* Refuse combinations that would start but lose data or not start at all. */}}
{{- define "cairn.validate" -}}
{{- $s := .Values.storage -}}
{{- if not (has $s.type (list "filesystem" "s3")) -}}
{{- fail (printf "storage.type %q: must be filesystem or s3" $s.type) -}}
{{- end -}}
{{- if and (eq $s.type "filesystem") (gt (int .Values.replicaCount) 1) -}}
{{- fail "replicaCount > 1 needs storage.type s3 (and redis.addr): a filesystem volume and its metadata store serve one process" -}}
{{- end -}}
{{- if eq $s.type "s3" -}}
{{- if not $s.s3.bucket -}}
{{- fail "storage.s3.bucket is required with storage.type s3" -}}
{{- end -}}
{{- if and (not .Values.redis.addr) (or (gt (int .Values.replicaCount) 1) (ne (toString .Values.dedup.mode) "off")) -}}
{{- fail "redis.addr is required with storage.type s3 and several replicas or dedup: the replicas share their caches and dedup metadata there" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The registry's configuration: generated from the values, then .Values.config
merged over it. Listeners are fixed inside the pod (the API on 5000, the debug
listener on debug.port); the Service maps service.port to 5000.
*/}}
{{- define "cairn.config" -}}
{{- $v := .Values -}}
{{- $debug := dict "addr" (printf ":%d" (int $v.debug.port)) "prometheus" (dict "enabled" true "path" "/metrics") -}}
{{- $cfg := dict "version" "0.1" -}}
{{- $_ := set $cfg "http" (dict "addr" ":5000" "debug" $debug) -}}
{{- $storage := dict "delete" (dict "enabled" true) -}}
{{- if eq $v.storage.type "s3" -}}
{{- $s3 := dict "bucket" $v.storage.s3.bucket "region" $v.storage.s3.region -}}
{{- if $v.storage.s3.regionendpoint -}}{{- $_ := set $s3 "regionendpoint" $v.storage.s3.regionendpoint -}}{{- end -}}
{{- if $v.storage.s3.forcepathstyle -}}{{- $_ := set $s3 "forcepathstyle" true -}}{{- end -}}
{{- $_ := set $storage "s3" $s3 -}}
{{- else -}}
{{- $_ := set $storage "filesystem" (dict "rootdirectory" "/var/lib/cairn") -}}
{{- end -}}
{{- $_ := set $storage "gc" (dict "enabled" $v.gc.enabled "interval" $v.gc.interval "delay" $v.gc.delay) -}}
{{- $dedup := dict "mode" (toString $v.dedup.mode) -}}
{{- if $v.redis.addr -}}
{{- $_ := set $cfg "redis" (dict "addrs" (list $v.redis.addr) "db" (int $v.redis.db)) -}}
{{- $_ := set $storage "cache" (dict "blobdescriptor" "redis") -}}
{{- if eq $v.storage.type "s3" -}}
{{- $_ := set $dedup "metadata" (dict "redis" (dict "prefix" "cairn:")) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $storage "dedup" $dedup -}}
{{- $_ := set $cfg "storage" $storage -}}
{{- $_ := set $cfg "log" (dict "formatter" "json") -}}
{{- $cfg = mustMergeOverwrite $cfg (deepCopy $v.config) -}}
{{- toYaml $cfg -}}
{{- end -}}
