{{/*
Names are fixed, as manifests/ names them: the operator's own Deployment
(OPENMED_OPERATOR_DEPLOYMENT), its Lease (--lease-name defaults to
openmed-operator) and the cluster-scoped roles do not follow the release
name, so there is one operator per cluster (see README.md).
*/}}

{{/*
The labels of every object: those the kustomize component
manifests/components/standard-labels adds (name, instance, version, part-of,
managed-by), the object's own component, and helm.sh/chart.
Call with (dict "ctx" $ "component" "rbac").
*/}}
{{- define "openmed-operator.labels" -}}
{{ include "openmed-operator.podLabels" . }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
{{- end }}

{{/*
The labels of a pod template: the object's labels less managed-by and
helm.sh/chart, as kustomize's pod templates (standard-labels) leave them
out, so that neither a chart version nor a move from kustomize to Helm
restarts a pod.
*/}}
{{- define "openmed-operator.podLabels" -}}
app.kubernetes.io/name: openmed-operator
app.kubernetes.io/instance: {{ .ctx.Release.Name | quote }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: openmed
app.kubernetes.io/component: {{ .component | quote }}
{{- end }}

{{/* The image as kustomize's images: entry writes it: name:tag, or name:tag@digest. */}}
{{- define "openmed-operator.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end }}

{{/*
The operator's rules: manifests/rbac/clusterrole.yaml, and the Role of
manifests/overlays/namespaced/role.yaml (the same rules, one namespace).
*/}}
{{- define "openmed-operator.rules" -}}
- apiGroups: ["openmed.ai"]
  resources: ["openmedmodels"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["openmed.ai"]
  resources: ["openmedmodels/status"]
  verbs: ["patch"]
# Lets the ConfigMap's ownerReference set blockOwnerDeletion.
- apiGroups: ["openmed.ai"]
  resources: ["openmedmodels/finalizers"]
  verbs: ["update"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "patch"]
# Read only: a Deployment an autoscaler scales keeps its replicas.
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Events: posted once per name; a repeat occurrence bumps the count.
# `list`: the operator's own Events, read at start and on taking the
# lease over, so none is posted twice.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "get", "list", "patch"]
{{- end }}

{{/*
What the schema cannot say (or says less clearly): fails the render with a
message naming the values. Included once, from deployment.yaml.
*/}}
{{- define "openmed-operator.validate" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) -}}
{{- fail (printf "replicas: %d needs leaderElection.enabled: true (only the Lease holder may write)" (int .Values.replicas)) -}}
{{- end -}}
{{- if and .Values.serviceMonitor.enabled (not .Values.metrics.service.enabled) -}}
{{- fail "serviceMonitor.enabled needs metrics.service.enabled: the ServiceMonitor selects that Service" -}}
{{- end -}}
{{- range .Values.extraArgs -}}
{{- if regexMatch "^--(all-namespaces|namespace|leader-elect)(=|$)" . -}}
{{- fail (printf "extraArgs: %s is the chart's: use watchNamespaces or leaderElection.enabled" .) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.createWatchedNamespaces (not .Values.watchNamespaces) -}}
{{- fail "createWatchedNamespaces needs watchNamespaces" -}}
{{- end -}}
{{- end }}
