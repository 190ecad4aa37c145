{{/* Names ----------------------------------------------------------------- */}}

{{- define "fleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fleet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "fleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* A name with a suffix, kept a valid DNS label (<= 63 chars). */}}
{{- define "fleet.suffixed" -}}
{{- $root := index . 0 -}}
{{- $suffix := index . 1 -}}
{{- printf "%s-%s" (include "fleet.fullname" $root | trunc (int (sub 62 (len $suffix)))) $suffix | trimSuffix "-" -}}
{{- end -}}

{{/* Labels ---------------------------------------------------------------- */}}

{{- define "fleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fleet.labels" -}}
helm.sh/chart: {{ include "fleet.chart" . }}
{{ include "fleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fleet
{{- end -}}

{{/* The fleet image (worker, fleet-produce, fleet-lag). */}}
{{- define "fleet.image" -}}
{{- printf "%s:%s" .Values.image.repository (toString (default .Chart.AppVersion .Values.image.tag)) -}}
{{- end -}}

{{/* Kafka ----------------------------------------------------------------- */}}

{{/* "true" when the Kafka clients need a properties file (a Secret). */}}
{{- define "fleet.kafka.secretEnabled" -}}
{{- $k := .Values.kafka -}}
{{- if or $k.existingSecret $k.sasl.enabled $k.tls.enabled (not (empty $k.extraProperties)) -}}true{{- end -}}
{{- end -}}

{{/* "true" when the chart makes the Kafka Secret itself. */}}
{{- define "fleet.kafka.chartSecret" -}}
{{- if and (include "fleet.kafka.secretEnabled" .) (not .Values.kafka.existingSecret) -}}true{{- end -}}
{{- end -}}

{{- define "fleet.kafka.secretName" -}}
{{- if .Values.kafka.existingSecret -}}
{{- .Values.kafka.existingSecret -}}
{{- else -}}
{{- include "fleet.suffixed" (list . "kafka") -}}
{{- end -}}
{{- end -}}

{{- define "fleet.kafka.securityProtocol" -}}
{{- $k := .Values.kafka -}}
{{- if and $k.sasl.enabled $k.tls.enabled -}}SASL_SSL
{{- else if $k.sasl.enabled -}}SASL_PLAINTEXT
{{- else if $k.tls.enabled -}}SSL
{{- else -}}PLAINTEXT
{{- end -}}
{{- end -}}

{{/* The librdkafka properties file the chart writes (chart-made Secret only). */}}
{{- define "fleet.kafka.properties" -}}
{{- $k := .Values.kafka -}}
security.protocol={{ include "fleet.kafka.securityProtocol" . }}
{{- if $k.sasl.enabled }}
sasl.mechanism={{ $k.sasl.mechanism }}
sasl.username={{ $k.sasl.username }}
sasl.password={{ $k.sasl.password }}
{{- end }}
{{- if and $k.tls.enabled $k.tls.ca }}
ssl.ca.location=/etc/fleet/kafka/ca.crt
{{- end }}
{{- if and $k.tls.enabled $k.tls.cert }}
ssl.certificate.location=/etc/fleet/kafka/tls.crt
ssl.key.location=/etc/fleet/kafka/tls.key
{{- end }}
{{- range $key, $value := $k.extraProperties }}
{{ $key }}={{ $value }}
{{- end }}
{{- end -}}

{{/* The data of the chart-made Kafka Secret (also its hook copy). */}}
{{- define "fleet.kafka.secretData" -}}
{{- $k := .Values.kafka -}}
kafka.properties: |
  {{- include "fleet.kafka.properties" . | nindent 2 }}
{{- if $k.sasl.enabled }}
username: {{ $k.sasl.username | quote }}
password: {{ $k.sasl.password | quote }}
{{- end }}
{{- if and $k.tls.enabled $k.tls.ca }}
ca.crt: |
  {{- $k.tls.ca | trim | nindent 2 }}
{{- end }}
{{- if and $k.tls.enabled $k.tls.cert }}
tls.crt: |
  {{- $k.tls.cert | trim | nindent 2 }}
tls.key: |
  {{- $k.tls.key | trim | nindent 2 }}
{{- end }}
{{- end -}}

{{/* KEDA's name for the SASL mechanism. */}}
{{- define "fleet.kafka.kedaSasl" -}}
{{- $m := upper .Values.kafka.sasl.mechanism -}}
{{- if eq $m "PLAIN" -}}plaintext
{{- else if eq $m "SCRAM-SHA-256" -}}scram_sha256
{{- else -}}scram_sha512
{{- end -}}
{{- end -}}

{{/* Env var and volume bits every Kafka client pod shares. */}}
{{- define "fleet.kafka.env" -}}
- name: FLEET_BROKERS
  value: {{ .Values.kafka.brokers | quote }}
{{- if include "fleet.kafka.secretEnabled" . }}
- name: FLEET_KAFKA_PROPERTIES_FILE
  value: /etc/fleet/kafka/kafka.properties
{{- end }}
{{- end -}}

{{- define "fleet.kafka.volumeMount" -}}
{{- if include "fleet.kafka.secretEnabled" . }}
- name: kafka
  mountPath: /etc/fleet/kafka
  readOnly: true
{{- end }}
{{- end -}}

{{/* The Kafka Secret volume; the optional second argument names another Secret (the hook copy). */}}
{{- define "fleet.kafka.volume" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- if include "fleet.kafka.secretEnabled" $root }}
- name: kafka
  secret:
    secretName: {{ $name }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{/* The release's name prefixes (fleet_connect::namespace). */}}
{{- define "fleet.names.env" -}}
- name: FLEET_TOPIC_PREFIX
  value: {{ .Values.names.topicPrefix | quote }}
- name: FLEET_GROUP_PREFIX
  value: {{ .Values.names.groupPrefix | quote }}
- name: FLEET_REDIS_PREFIX
  value: {{ .Values.names.redisPrefix | quote }}
{{- end -}}

{{/* A PromQL regex matching every consumer group of the release, written
     as it stands inside a PromQL string in files/*.yml (backslashes doubled). */}}
{{- define "fleet.groupRegex" -}}
{{- printf "%s.+" (regexQuoteMeta .Values.names.groupPrefix | replace "\\" "\\\\") -}}
{{- end -}}

{{/* The same regex of a prefix as it stands in a PromQL string inside the
     dashboard's JSON (backslashes doubled twice). (list $ "fleet." ) */}}
{{- define "fleet.jsonPrefixRegex" -}}
{{- regexQuoteMeta . | replace "\\" "\\\\\\\\" -}}
{{- end -}}

{{/* Redis ----------------------------------------------------------------- */}}

{{- define "fleet.redis.chartSecret" -}}
{{- if and .Values.redis.password (not .Values.redis.existingSecret) -}}true{{- end -}}
{{- end -}}

{{/* The URL with credentials, each part percent-encoded. */}}
{{- define "fleet.redis.urlWithCredentials" -}}
{{- $r := .Values.redis -}}
{{- $u := urlParse $r.url -}}
{{- $pass := urlquery $r.password | replace "+" "%20" -}}
{{- $user := urlquery $r.username | replace "+" "%20" -}}
{{- $query := ternary (printf "?%s" $u.query) "" (ne $u.query "") -}}
{{- printf "%s://%s:%s@%s%s%s" $u.scheme $user $pass $u.host $u.path $query -}}
{{- end -}}

{{- define "fleet.redis.env" -}}
{{- if .Values.redis.cluster }}
- name: FLEET_REDIS_CLUSTER
  value: "true"
{{- if .Values.redis.waitReplicas }}
{{- fail "redis.waitReplicas does not go with redis.cluster: WAIT covers one node's replicas, and the worker refuses the combination" }}
{{- end }}
{{- end }}
{{- if .Values.redis.waitReplicas }}
- name: FLEET_REDIS_WAIT_REPLICAS
  value: {{ .Values.redis.waitReplicas | int | quote }}
{{- end }}
- name: FLEET_REDIS_URL
{{- if .Values.redis.existingSecret }}
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret }}
      key: {{ .Values.redis.existingSecretKey }}
{{- else if .Values.redis.password }}
  valueFrom:
    secretKeyRef:
      name: {{ include "fleet.suffixed" (list . "redis") }}
      key: redis-url
{{- else }}
  value: {{ .Values.redis.url | quote }}
{{- end }}
{{- end -}}

{{/* TLS to Redis: the files of redis.tls.existingSecret under this folder. */}}
{{- define "fleet.redis.tlsDir" -}}/etc/fleet/redis-tls{{- end -}}

{{/* Env vars naming the mounted PEM files (workers only). */}}
{{- define "fleet.redis.tlsEnv" -}}
{{- $t := .Values.redis.tls -}}
{{- if $t.enabled }}
- name: FLEET_REDIS_CA_FILE
  value: {{ printf "%s/%s" (include "fleet.redis.tlsDir" .) $t.caKey | quote }}
{{- if $t.clientCertificate }}
- name: FLEET_REDIS_CLIENT_CERT
  value: {{ printf "%s/%s" (include "fleet.redis.tlsDir" .) $t.certKey | quote }}
- name: FLEET_REDIS_CLIENT_KEY
  value: {{ printf "%s/%s" (include "fleet.redis.tlsDir" .) $t.keyKey | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "fleet.redis.tlsVolumeMount" -}}
{{- if .Values.redis.tls.enabled }}
- name: redis-tls
  mountPath: {{ include "fleet.redis.tlsDir" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{/* Only the keys the worker reads are projected: a missing key stops the
pod at mount time with the key's name, and nothing else in the Secret (a
private key without clientCertificate) reaches the pod. */}}
{{- define "fleet.redis.tlsVolume" -}}
{{- $t := .Values.redis.tls -}}
{{- if $t.enabled }}
- name: redis-tls
  secret:
    secretName: {{ $t.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ $t.caKey | quote }}
        path: {{ $t.caKey | quote }}
      {{- if $t.clientCertificate }}
      - key: {{ $t.certKey | quote }}
        path: {{ $t.certKey | quote }}
      - key: {{ $t.keyKey | quote }}
        path: {{ $t.keyKey | quote }}
      {{- end }}
{{- end }}
{{- end -}}

{{/* Models ---------------------------------------------------------------- */}}

{{/* An int from a string or number ("" -> the fallback). */}}
{{- define "fleet.int" -}}
{{- $v := index . 0 -}}
{{- if or (kindIs "invalid" $v) (eq (toString $v) "") -}}{{- index . 1 -}}{{- else -}}{{- int64 $v -}}{{- end -}}
{{- end -}}

{{/* Cores of a cpu quantity, rounded down, at least 1 ("500m" -> 1, "2" -> 2, 3.5 -> 3). */}}
{{- define "fleet.cpuCores" -}}
{{- $cpu := toString . -}}
{{- $n := 1 -}}
{{- if hasSuffix "m" $cpu -}}
{{- $n = div (atoi (trimSuffix "m" $cpu)) 1000 -}}
{{- else if $cpu -}}
{{- $n = int (floor (float64 $cpu)) -}}
{{- end -}}
{{- max 1 $n -}}
{{- end -}}

{{/*
Resolves .Values.models against .Values.modelDefaults and checks them.
Call with a dict holding "root" (the chart context); the list of models is
stored under its "models" key, so no number goes through a string:
  {{- $ctx := dict "root" $ -}}{{- include "fleet.models" $ctx -}}
*/}}
{{- define "fleet.models" -}}
{{- $root := .root -}}
{{- $defaults := $root.Values.modelDefaults -}}
{{- $seen := dict -}}
{{- $out := list -}}
{{- if empty $root.Values.models -}}
{{- fail "models: list at least one model (e.g. - name: minilm)" -}}
{{- end -}}
{{- range $i, $given := $root.Values.models -}}
{{- if not $given.name -}}
{{- fail (printf "models[%d]: name is required" $i) -}}
{{- end -}}
{{- $name := toString $given.name -}}
{{- if not (regexMatch "^[a-z0-9_-]{1,64}$" $name) -}}
{{- fail (printf "models[%d]: name %q must be 1-64 lower-case letters, digits, '_' or '-' (as the worker accepts)" $i $name) -}}
{{- end -}}
{{- if hasKey $seen $name -}}
{{- fail (printf "models: %q is listed twice" $name) -}}
{{- end -}}
{{- $_ := set $seen $name true -}}
{{- $m := deepCopy $defaults -}}
{{- range $key, $value := $given -}}
{{- if ne $key "replicas" -}}{{- $_ := set $m $key $value -}}{{- end -}}
{{- end -}}
{{- $replicas := deepCopy (default dict $defaults.replicas) -}}
{{- range $key, $value := (default dict $given.replicas) -}}{{- $_ := set $replicas $key $value -}}{{- end -}}
{{- $partitions := int (include "fleet.int" (list $m.partitions 8)) -}}
{{- if lt $partitions 1 -}}
{{- fail (printf "models[%s]: partitions must be at least 1" $name) -}}
{{- end -}}
{{- $max := int (include "fleet.int" (list $replicas.max $partitions)) -}}
{{- $min := int (include "fleet.int" (list $replicas.min 1)) -}}
{{- if gt $max $partitions -}}
{{- fail (printf "models[%s]: replicas.max %d exceeds the topic's %d partitions: workers beyond the partition count of infer.%s would sit idle. Lower replicas.max or raise partitions." $name $max $partitions $name) -}}
{{- end -}}
{{- if lt $max 1 -}}
{{- fail (printf "models[%s]: replicas.max must be at least 1" $name) -}}
{{- end -}}
{{- if gt $min $max -}}
{{- fail (printf "models[%s]: replicas.min %d is above replicas.max %d" $name $min $max) -}}
{{- end -}}
{{- if and (eq $min 0) (ne $root.Values.autoscaling.mode "keda") -}}
{{- fail (printf "models[%s]: replicas.min 0 needs autoscaling.mode keda (an HPA cannot scale from zero)" $name) -}}
{{- end -}}
{{- if and (eq $min 0) $root.Values.autoscaling.keda.cpuTrigger -}}
{{- fail (printf "models[%s]: replicas.min 0 needs autoscaling.keda.cpuTrigger false (KEDA cannot scale to zero with a cpu trigger)" $name) -}}
{{- end -}}
{{- $device := toString $m.device -}}
{{- if not (has $device (list "cpu" "cuda" "auto")) -}}
{{- fail (printf "models[%s]: device must be cpu, cuda or auto, not %q" $name $device) -}}
{{- end -}}
{{- $drain := int (include "fleet.int" (list $m.drainTimeoutSeconds 25)) -}}
{{- $grace := int (include "fleet.int" (list $m.terminationGracePeriodSeconds (add $drain 15))) -}}
{{- if le $grace $drain -}}
{{- fail (printf "models[%s]: terminationGracePeriodSeconds %d must exceed drainTimeoutSeconds %d, or Kubernetes kills the worker mid-drain" $name $grace $drain) -}}
{{- end -}}
{{- $stall := int (include "fleet.int" (list $m.stallTimeoutSeconds 60)) -}}
{{- if lt $stall 1 -}}
{{- fail (printf "models[%s]: stallTimeoutSeconds must be at least 1" $name) -}}
{{- end -}}
{{- $resources := default dict $m.resources -}}
{{- $cpuRequest := "" -}}
{{- if $resources.requests -}}{{- $cpuRequest = default "" (index $resources.requests "cpu") -}}{{- end -}}
{{- /* "auto": no FLEET_INTRA_OP_THREADS, the worker measures (docs/operations.md). */ -}}
{{- $threads := "auto" -}}
{{- if ne (toString $m.intraOpThreads) "auto" -}}
{{- $threads = int (include "fleet.int" (list $m.intraOpThreads (max 1 (sub (int (include "fleet.cpuCores" $cpuRequest)) 1)))) -}}
{{- end -}}
{{- $dns := regexReplaceAll "[^a-z0-9-]" $name "-" | trimSuffix "-" -}}
{{- /* What the bulk lane's lag alone may ask for: autoscaling.bulk.maxReplicas, never above the model's max. */ -}}
{{- $bulkMax := min $max (int (include "fleet.int" (list $root.Values.autoscaling.bulk.maxReplicas $max))) -}}
{{- $resolved := dict
      "name" $name
      "dns" $dns
      "workerName" (include "fleet.suffixed" (list $root (printf "worker-%s" $dns)))
      "topic" (printf "%s%s" $root.Values.names.topicPrefix $name)
      "bulkTopic" (printf "%s%s.bulk" $root.Values.names.topicPrefix $name)
      "bulkMax" $bulkMax
      "group" (printf "%s%s" $root.Values.names.groupPrefix $name)
      "partitions" $partitions
      "maxValueBytes" (int64 (include "fleet.int" (list $m.maxValueBytes 20000000)))
      "min" $min
      "max" $max
      "device" $device
      "threads" $threads
      "drain" $drain
      "grace" $grace
      "stall" $stall
      "resources" $resources
      "nodeSelector" (default dict $m.nodeSelector)
      "tolerations" (default list $m.tolerations)
      "affinity" (default dict $m.affinity)
      "env" (default list $m.env)
      "podAnnotations" (default dict $m.podAnnotations) -}}
{{- $out = append $out $resolved -}}
{{- end -}}
{{- $_ := set . "models" $out -}}
{{- end -}}

{{/* Checks of settings outside the models (called from every workload template). */}}
{{- define "fleet.validate" -}}
{{- $v := .Values -}}
{{- if not (has $v.autoscaling.mode (list "hpa" "keda" "none")) -}}
{{- fail (printf "autoscaling.mode must be hpa, keda or none, not %q" $v.autoscaling.mode) -}}
{{- end -}}
{{- if and $v.autoscaling.bulk.enabled (eq $v.autoscaling.mode "keda") (include "fleet.bulk.capped" .) (not $v.autoscaling.bulk.prometheusServerAddress) -}}
{{- fail "autoscaling.bulk.maxReplicas in keda mode needs autoscaling.bulk.prometheusServerAddress: KEDA's Kafka scaler cannot cap one trigger, so the bulk trigger reads the clamped bulk lag from Prometheus (fleet-lag's series). Set the address, or leave maxReplicas empty (the bulk trigger is then a Kafka scaler like the interactive one)" -}}
{{- end -}}
{{- if not $v.kafka.brokers -}}
{{- fail "kafka.brokers is required" -}}
{{- end -}}
{{- if and $v.kafka.sasl.enabled (not $v.kafka.existingSecret) -}}
{{- if not (has (upper $v.kafka.sasl.mechanism) (list "PLAIN" "SCRAM-SHA-256" "SCRAM-SHA-512")) -}}
{{- fail (printf "kafka.sasl.mechanism must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, not %q" $v.kafka.sasl.mechanism) -}}
{{- end -}}
{{- if or (not $v.kafka.sasl.username) (not $v.kafka.sasl.password) -}}
{{- fail "kafka.sasl.enabled needs kafka.sasl.username and kafka.sasl.password (or kafka.existingSecret)" -}}
{{- end -}}
{{- end -}}
{{- if ne (empty $v.kafka.tls.cert) (empty $v.kafka.tls.key) -}}
{{- fail "kafka.tls.cert and kafka.tls.key go together (mutual TLS needs both)" -}}
{{- end -}}
{{- if and (not $v.modelRepository.existingClaim) (not $v.modelRepository.image.repository) -}}
{{- fail "modelRepository: set image.repository (an image holding /models) or existingClaim (a PVC)" -}}
{{- end -}}
{{- with $v.redis.tls -}}
{{- if .enabled -}}
{{- if $v.redis.cluster -}}
{{- fail "redis.cluster and redis.tls.enabled do not go together: with --redis-cluster the worker refuses a CA or client certificate file and will not start (a cluster over TLS trusts the system's roots). For a cluster over TLS, leave redis.tls.enabled false and give rediss:// seed URLs" -}}
{{- end -}}
{{- if not .existingSecret -}}
{{- fail "redis.tls.enabled needs redis.tls.existingSecret: the Secret holding the CA certificate (caKey) and, with clientCertificate, the client certificate and key (certKey, keyKey)" -}}
{{- end -}}
{{- if not .caKey -}}
{{- fail "redis.tls.caKey must name the CA certificate's key in redis.tls.existingSecret" -}}
{{- end -}}
{{- if and .clientCertificate (or (not .certKey) (not .keyKey)) -}}
{{- fail "redis.tls.clientCertificate needs redis.tls.certKey and redis.tls.keyKey (mutual TLS needs both)" -}}
{{- end -}}
{{- $keys := dict "caKey" .caKey -}}
{{- if .clientCertificate -}}{{- $_ := set $keys "certKey" .certKey -}}{{- $_ := set $keys "keyKey" .keyKey -}}{{- end -}}
{{- range $name, $key := $keys -}}
{{- if or (not (regexMatch "^[-._a-zA-Z0-9]+$" (toString $key))) (has (toString $key) (list "." "..")) -}}
{{- fail (printf "redis.tls.%s %q is not a valid Secret key (letters, digits, '-', '_', '.')" $name (toString $key)) -}}
{{- end -}}
{{- end -}}
{{- if and .clientCertificate (eq (len (uniq (values $keys))) 3 | not) -}}
{{- fail "redis.tls.caKey, certKey and keyKey must be three different keys" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $v.redis.existingSecret -}}
{{- $u := urlParse $v.redis.url -}}
{{- if or (not $u.scheme) (not $u.host) -}}
{{- fail "redis.url must look like redis://host:6379" -}}
{{- end -}}
{{- if contains ":" $u.userinfo -}}
{{- fail "redis.url must not hold a password (it would be a plain env value): use redis.password or redis.existingSecret" -}}
{{- end -}}
{{- if and $v.redis.password $u.userinfo -}}
{{- fail "redis.url must not hold a user when redis.password is set: use redis.username" -}}
{{- end -}}
{{- if and $v.redis.tls.enabled (ne $u.scheme "rediss") -}}
{{- fail (printf "redis.tls.enabled needs a rediss:// URL, but redis.url starts with %s:// (the worker would speak plaintext)" $u.scheme) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Autoscaling on the bulk lane -------------------------------------------- */}}

{{/* "true" when autoscaling.bulk.maxReplicas caps the bulk lane's proposal. */}}
{{- define "fleet.bulk.capped" -}}
{{- if ne (toString .Values.autoscaling.bulk.maxReplicas) "" -}}true{{- end -}}
{{- end -}}

{{/*
The bulk lane's lag as a PromQL expression around a per-partition series
selector: deduplicated per partition across scrape targets (fleet-lag and
every worker export it), summed, 0 when no series exists (a bulk topic
nobody made yet must read "no lag", not "no data": an HPA with a metric it
cannot read never scales down), and with a cap, clamped at lagThreshold x
cap so that the proposal ceil(lag / lagThreshold) never exceeds the cap.
(list $ "<series selector>" cap-or-0)
*/}}
{{- define "fleet.bulk.lagQuery" -}}
{{- $root := index . 0 -}}
{{- $series := index . 1 -}}
{{- $cap := int (index . 2) -}}
{{- $query := printf "sum(max by (consumergroup, topic, partition) (%s)) or vector(0)" $series -}}
{{- if gt $cap 0 -}}
{{- $query = printf "clamp_max(%s, %d)" $query (mul (int $root.Values.autoscaling.bulk.lagThreshold) $cap) -}}
{{- end -}}
{{- $query -}}
{{- end -}}

{{/* The scaling behavior shared by the HPA and KEDA's HPA. */}}
{{- define "fleet.hpaBehavior" -}}
scaleUp:
  stabilizationWindowSeconds: {{ int .Values.autoscaling.scaleUp.stabilizationWindowSeconds }}
  selectPolicy: {{ .Values.autoscaling.scaleUp.selectPolicy }}
  policies:
{{- range .Values.autoscaling.scaleUp.policies }}
    - type: {{ .type }}
      value: {{ int .value }}
      periodSeconds: {{ int .periodSeconds }}
{{- end }}
scaleDown:
  stabilizationWindowSeconds: {{ int .Values.autoscaling.scaleDown.stabilizationWindowSeconds }}
  selectPolicy: {{ .Values.autoscaling.scaleDown.selectPolicy }}
  policies:
{{- range .Values.autoscaling.scaleDown.policies }}
    - type: {{ .type }}
      value: {{ int .value }}
      periodSeconds: {{ int .periodSeconds }}
{{- end }}
{{- end -}}

{{/* Hook annotations for objects the topic job needs before install. */}}
{{- define "fleet.hookAnnotations" -}}
helm.sh/hook: pre-install,pre-upgrade
helm.sh/hook-weight: {{ . | quote }}
{{- end -}}
