{{- define "shellbox.name" -}}
{{- default "shellbox" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "shellbox.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The session pods' namespace. */}}
{{- define "shellbox.sessionsNamespace" -}}
{{- default (printf "%s-sessions" .Release.Name) .Values.sessions.namespace | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The server pods' labels: the Deployment's selector and the sessions' NetworkPolicy's (kube.serverSelector). */}}
{{- define "shellbox.selectorLabels" -}}
app.kubernetes.io/name: {{ include "shellbox.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "shellbox.labels" -}}
{{ include "shellbox.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "shellbox.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{- define "shellbox.tokensSecret" -}}
{{- default (printf "%s-tokens" (include "shellbox.fullname" .)) .Values.tokens.existingSecret -}}
{{- end -}}

{{/* The server's configuration (package config), as the ConfigMap holds it. */}}
{{- define "shellbox.config" -}}
{{- $cfg := dict
  "backend" "kube"
  "server" (dict
    "listen" (printf ":%d" (int .Values.server.port))
    "logLevel" .Values.server.logLevel
    "shutdownTimeout" (printf "%ds" (int .Values.server.shutdownTimeoutSeconds))
    "drainDelay" (printf "%ds" (int .Values.server.drainDelaySeconds))
    "tokensFile" "/etc/shellbox/tokens/tokens.yaml"
    "tenants" .Values.server.tenants)
  "sandbox" .Values.sandbox
  "audit" (dict "file" "/var/lib/shellbox/audit.log")
  "kube" (dict
    "namespace" (include "shellbox.sessionsNamespace" .)
    "release" .Release.Name
    "agentImage" (include "shellbox.image" .)
    "agentPath" "/usr/local/bin/shellbox-agent"
    "agentPort" (int .Values.kube.agentPort)
    "runtimeClasses" .Values.kube.runtimeClasses
    "podSecurity" .Values.kube.podSecurity
    "imagePullPolicy" .Values.image.pullPolicy
    "readyTimeout" .Values.kube.readyTimeout
    "cpuRequestRatio" .Values.kube.cpuRequestRatio
    "workspaceMedium" .Values.kube.workspaceMedium
    "gracePeriodSeconds" (int .Values.kube.gracePeriodSeconds)
    "approvals" .Values.kube.approvals
    "serverSelector" (include "shellbox.selectorLabels" . | fromYaml)
    "serverNamespace" .Release.Namespace) -}}
{{- if .Values.policies }}
{{- $_ := set $cfg "policies" (dict "dir" "/etc/shellbox/policies") }}
{{- end }}
{{- $_ := set $cfg "snapshots" (include "shellbox.snapshots" . | fromYaml) }}
{{- $_ := set $cfg "egress" (dict "keyFile" "/etc/shellbox/egress-key/key") }}
{{- if .Values.secrets.existingSecret }}
{{- $_ := set $cfg "secrets" (dict "dir" "/etc/shellbox/secrets") }}
{{- end }}
{{- toYaml (mergeOverwrite (deepCopy .Values.config) $cfg) -}}
{{- end -}}

{{/*
The snapshots section of the server's config. "s3" needs its endpoint,
bucket and the Secret holding its secret key, mounted at
/etc/shellbox/snapshots-s3 (see the Deployment); "dir" cannot work here,
the replicas share no disk.
*/}}
{{- define "shellbox.snapshots" -}}
{{- $sn := .Values.snapshots -}}
{{- $out := dict "store" $sn.store "suspendedTTL" $sn.suspendedTTL -}}
{{- if eq $sn.store "s3" -}}
{{- if or (not $sn.s3.endpoint) (not $sn.s3.bucket) (not $sn.s3.secretKeySecret) -}}
{{- fail "snapshots.store s3 needs snapshots.s3.endpoint, snapshots.s3.bucket and snapshots.s3.secretKeySecret (a Secret of the release's namespace holding the secret key)" -}}
{{- end -}}
{{- $_ := set $out "s3" (dict
  "endpoint" $sn.s3.endpoint
  "bucket" $sn.s3.bucket
  "prefix" $sn.s3.prefix
  "region" $sn.s3.region
  "insecure" $sn.s3.insecure
  "accessKey" $sn.s3.accessKey
  "secretKeyFile" (printf "/etc/shellbox/snapshots-s3/%s" $sn.s3.secretKeySecretKey)) -}}
{{- else if ne $sn.store "none" -}}
{{- fail (printf "snapshots.store %q: want none or s3 (the replicas share no disk for dir)" $sn.store) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
The Secret holding the release's egress key (key "key"): the chart's own,
or egressKey.existingSecret.
*/}}
{{- define "shellbox.egressKeySecret" -}}
{{- .Values.egressKey.existingSecret | default (printf "%s-egress-key" (include "shellbox.fullname" .)) -}}
{{- end -}}
