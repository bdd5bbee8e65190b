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
    "approvals" .Values.kube.approvals
    "serverSelector" (include "shellbox.selectorLabels" . | fromYaml)
    "serverNamespace" .Release.Namespace) -}}
{{- if .Values.policies }}
{{- $_ := set $cfg "policies" (dict "dir" "/etc/shellbox/policies") }}
{{- end }}
{{- toYaml (mergeOverwrite (deepCopy .Values.config) $cfg) -}}
{{- end -}}
