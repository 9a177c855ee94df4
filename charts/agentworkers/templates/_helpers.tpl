{{/* Names: every object is named from the release's full name. */}}
{{- define "agentworkers.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "agentworkers.fullname" -}}
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

{{/* A name of the release's full name and a suffix, within 63 characters. */}}
{{- define "agentworkers.component" -}}
{{- $root := index . 0 -}}
{{- $suffix := index . 1 -}}
{{- printf "%s-%s" (include "agentworkers.fullname" $root | trunc (int (sub 62 (len $suffix)))) $suffix | trimSuffix "-" -}}
{{- end -}}

{{- define "agentworkers.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Every pod of the release (the metrics Service scrapes both roles). */}}
{{- define "agentworkers.releaseSelectorLabels" -}}
app.kubernetes.io/name: {{ include "agentworkers.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The pods of one Deployment: (list $ component); "operator" is the controller's. */}}
{{- define "agentworkers.componentSelectorLabels" -}}
{{ include "agentworkers.releaseSelectorLabels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "agentworkers.selectorLabels" -}}
{{ include "agentworkers.componentSelectorLabels" (list . "operator") }}
{{- end -}}

{{/* Whether admission runs in a Deployment of its own (admission.replicas > 0). */}}
{{- define "agentworkers.admissionSplit" -}}
{{- if and .Values.webhook.enabled (gt (int .Values.admission.replicas) 0) -}}true{{- end -}}
{{- end -}}

{{- define "agentworkers.labels" -}}
helm.sh/chart: {{ include "agentworkers.chart" . }}
app.kubernetes.io/name: {{ include "agentworkers.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agentworkers
{{- end -}}

{{- define "agentworkers.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "agentworkers.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "agentworkers.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* The webhook: its Service, the host the API server dials, its configuration's name. */}}
{{- define "agentworkers.webhookService" -}}
{{- include "agentworkers.component" (list . "webhook") -}}
{{- end -}}

{{- define "agentworkers.webhookHost" -}}
{{- if .Values.webhook.host -}}
{{- .Values.webhook.host -}}
{{- else if .Values.webhook.service.clusterIP -}}
{{- .Values.webhook.service.clusterIP -}}
{{- else -}}
{{- printf "%s.%s.svc" (include "agentworkers.webhookService" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{- define "agentworkers.webhookConfigurationName" -}}
{{- $full := include "agentworkers.fullname" . -}}
{{- if .Values.webhook.configurationName -}}
{{- .Values.webhook.configurationName -}}
{{- else if eq $full "agentworkers" -}}
agentworkers.io
{{- else -}}
{{- printf "%s.agentworkers.io" $full -}}
{{- end -}}
{{- end -}}

{{/* Where the webhook's certificate comes from: certManager, secret or operator. */}}
{{- define "agentworkers.tlsMode" -}}
{{- if .Values.webhook.certManager.enabled -}}
certManager
{{- else if .Values.webhook.tls.secretName -}}
secret
{{- else -}}
operator
{{- end -}}
{{- end -}}

{{- define "agentworkers.tlsSecretName" -}}
{{- if .Values.webhook.certManager.enabled -}}
{{- include "agentworkers.component" (list . "webhook-tls") -}}
{{- else -}}
{{- .Values.webhook.tls.secretName -}}
{{- end -}}
{{- end -}}

{{/* Watched namespaces: "true" when any is a glob (no RoleBinding can name it). */}}
{{- define "agentworkers.hasGlobs" -}}
{{- $globs := false -}}
{{- range .Values.watchNamespaces -}}
{{- if regexMatch "[*?\\[]" . -}}{{- $globs = true -}}{{- end -}}
{{- end -}}
{{- ternary "true" "" $globs -}}
{{- end -}}

{{/* "true" when the operator's namespaced permissions are bound per namespace. */}}
{{- define "agentworkers.namespacedRBAC" -}}
{{- if and .Values.watchNamespaces (not (include "agentworkers.hasGlobs" .)) -}}true{{- end -}}
{{- end -}}

{{/* Namespaces that get the workers' NetworkPolicy. */}}
{{- define "agentworkers.networkPolicyNamespaces" -}}
{{- $out := list -}}
{{- if .Values.networkPolicy.namespaces -}}
{{- $out = .Values.networkPolicy.namespaces -}}
{{- else -}}
{{- range .Values.watchNamespaces -}}
{{- if not (regexMatch "[*?\\[]" .) -}}{{- $out = append $out . -}}{{- end -}}
{{- end -}}
{{- if not $out -}}{{- $out = list $.Release.Namespace -}}{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Checks no schema can express: fail the install with a sentence saying what to do. */}}
{{- define "agentworkers.validate" -}}
{{- $serving := ternary .Values.admission.replicas (max (int .Values.replicas) (int .Values.shards)) (eq (include "agentworkers.admissionSplit" .) "true") -}}
{{- if and (gt (int $serving) 1) .Values.webhook.enabled (eq (include "agentworkers.tlsMode" .) "operator") -}}
{{- fail "more than one replica serving the webhook needs one certificate for every replica: set webhook.certManager.enabled=true or webhook.tls.secretName (each replica's own self-signed certificate would fight over the webhook's caBundle)" -}}
{{- end -}}
{{- if and (gt (int .Values.replicas) 1) (gt (int .Values.shards) 1) -}}
{{- fail "replicas > 1 (active/standby) and shards > 1 (every replica active, each on its shard) exclude each other: set one" -}}
{{- end -}}
{{- end -}}

{{- define "agentworkers.workerDefaultsName" -}}
{{- printf "%s-worker-defaults" (include "agentworkers.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The install's worker pod knobs, the chart's image unless they name another. */}}
{{- define "agentworkers.workerDefaults" -}}
{{- $defaults := merge (dict) .Values.workerDefaults (dict "image" (include "agentworkers.image" .)) -}}
{{- toYaml $defaults -}}
{{- end -}}
