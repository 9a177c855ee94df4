{{/*
One Deployment of the operator in a role: "all" (reconcile and admission in one process),
"controller" or "admission". Arguments: (list $ role replicas component).
*/}}
{{- define "agentworkers.deployment" -}}
{{- $root := index . 0 -}}
{{- $role := index . 1 -}}
{{- $replicas := int (index . 2) -}}
{{- $component := index . 3 -}}
{{- $tlsMode := include "agentworkers.tlsMode" $root -}}
{{- $webhook := and $root.Values.webhook.enabled (ne $role "controller") -}}
{{- $sharded := and (gt (int $root.Values.shards) 1) (ne $role "admission") -}}
{{- $standby := and (gt $replicas 1) (ne $role "admission") (not $sharded) -}}
{{- $name := ternary (include "agentworkers.fullname" $root) (include "agentworkers.component" (list $root $component)) (eq $component "operator") -}}
apiVersion: apps/v1
kind: {{ ternary "StatefulSet" "Deployment" $sharded }}
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "agentworkers.labels" $root | nindent 4 }}
spec:
  {{- if $sharded }}
  # One pod per shard, named <name>-<ordinal>: the ordinal is the shard it serves. All
  # start at once; a pod that goes is replaced under its name, and meanwhile another
  # serves its shard.
  replicas: {{ $root.Values.shards }}
  serviceName: {{ $name }}-shards
  podManagementPolicy: Parallel
  updateStrategy:
    type: RollingUpdate
  {{- else }}
  replicas: {{ $replicas }}
  {{- end }}
  {{- if $sharded }}
  {{- else if or $standby (eq $role "admission") }}
  # One replica holds the Lease and the others stand by; admission replicas all answer.
  # Either way a new pod starts before an old one stops (an old leader, stopping, hands
  # its Lease over at once).
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
      maxUnavailable: 0
  {{- else }}
  # One replica, no Lease: the old pod stops before the new one starts, so two never act.
  strategy:
    type: Recreate
  {{- end }}
  selector:
    matchLabels:
      {{- include "agentworkers.componentSelectorLabels" (list $root $component) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "agentworkers.componentSelectorLabels" (list $root $component) | nindent 8 }}
        {{- with $root.Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        # The operator reads its worker defaults at start: a change rolls its pods.
        agentworkers.io/worker-defaults: {{ include "agentworkers.workerDefaults" $root | sha256sum | trunc 16 }}
        {{- with $root.Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "agentworkers.serviceAccountName" $root }}
      automountServiceAccountToken: true
      enableServiceLinks: false
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      terminationGracePeriodSeconds: {{ $root.Values.terminationGracePeriodSeconds }}
      containers:
        - name: operator
          image: {{ include "agentworkers.image" $root | quote }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            - operator
            {{- range $root.Values.watchNamespaces }}
            - --namespace={{ . }}
            {{- end }}
            {{- if ne $role "all" }}
            - --role={{ $role }}
            {{- end }}
            {{- if $webhook }}
            - --webhook-port={{ $root.Values.webhook.port }}
            - --webhook-addr=0.0.0.0
            - --webhook-host={{ include "agentworkers.webhookHost" $root }}
            - --webhook-name={{ include "agentworkers.webhookConfigurationName" $root }}
            - --tls-dir=/var/run/agentworkers/tls
            {{- else if eq $role "all" }}
            - --no-webhook
            {{- end }}
            {{- if ne $role "admission" }}
            - --worker-defaults=/etc/agentworkers/worker-defaults.yaml
            {{- end }}
            - --metrics-port={{ ternary $root.Values.metrics.port 0 $root.Values.metrics.enabled }}
            - --metrics-addr=0.0.0.0
            {{- with $root.Values.tracing.endpoint }}
            - --otlp-endpoint={{ . }}
            - --trace-sample-ratio={{ $root.Values.tracing.sampleRatio }}
            {{- end }}
            - --log-format=json
            - --liveness=http://0.0.0.0:{{ $root.Values.health.port }}/healthz
            {{- if $standby }}
            # Active/standby: one shard, every replica index 0, told apart by its pod's name.
            - --leader-elect
            {{- end }}
            {{- if $sharded }}
            # The shard index is the ordinal ending the pod's hostname.
            - --shards={{ $root.Values.shards }}
            {{- end }}
            {{- if or $standby $sharded }}
            - --lease-namespace={{ $root.Release.Namespace }}
            - --lease-name={{ include "agentworkers.fullname" $root }}
            {{- end }}
            {{- range $root.Values.extraArgs }}
            - {{ . | quote }}
            {{- end }}
          env:
            # Its identity on a Lease, with the pod's name: kept by a restarted container.
            - name: AGENTWORKERS_POD_UID
              valueFrom:
                fieldRef:
                  fieldPath: metadata.uid
            - name: AGENTWORKERS_OPERATOR_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            - name: PYTHONUNBUFFERED
              value: "1"
            {{- with $root.Values.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: health
              containerPort: {{ $root.Values.health.port }}
              protocol: TCP
            {{- if $root.Values.metrics.enabled }}
            - name: metrics
              containerPort: {{ $root.Values.metrics.port }}
              protocol: TCP
            {{- end }}
            {{- if $webhook }}
            - name: webhook
              containerPort: {{ $root.Values.webhook.port }}
              protocol: TCP
            {{- end }}
          {{- with $root.Values.livenessProbe }}
          livenessProbe:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          readinessProbe:
            {{- if $root.Values.readinessProbe }}
            {{- toYaml $root.Values.readinessProbe | nindent 12 }}
            {{- else }}
            httpGet:
              {{- if $webhook }}
              path: /readyz
              port: webhook
              scheme: HTTPS
              {{- else }}
              path: /healthz
              port: health
              {{- end }}
            periodSeconds: 5
            timeoutSeconds: 5
            failureThreshold: 3
            {{- end }}
          resources:
            {{- toYaml $root.Values.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            {{- if ne $role "admission" }}
            - name: worker-defaults
              mountPath: /etc/agentworkers
              readOnly: true
            {{- end }}
            {{- if $webhook }}
            - name: webhook-tls
              mountPath: /var/run/agentworkers/tls
              readOnly: {{ ne $tlsMode "operator" }}
            {{- end }}
      volumes:
        - name: tmp
          emptyDir:
            sizeLimit: 64Mi
        {{- if ne $role "admission" }}
        - name: worker-defaults
          configMap:
            name: {{ include "agentworkers.workerDefaultsName" $root }}
        {{- end }}
        {{- if $webhook }}
        {{- if eq $tlsMode "operator" }}
        # The operator makes a self-signed certificate here and renews it on restart.
        - name: webhook-tls
          emptyDir:
            medium: Memory
            sizeLimit: 1Mi
        {{- else }}
        - name: webhook-tls
          secret:
            secretName: {{ include "agentworkers.tlsSecretName" $root }}
            defaultMode: 0440
            items:
              - {key: tls.crt, path: tls.crt}
              - {key: tls.key, path: tls.key}
        {{- end }}
        {{- end }}
      {{- with $root.Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}
