{{/*
The release's objects are named <fullname>-<part>: with the release named
gpuslice (as the plain manifests of install/kubernetes are rendered), the
webhook is gpuslice-webhook and the policies gpuslice-vgpu-*.
*/}}
{{- define "gpuslice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels of every object: gpuslice.labels (dict "root" $ "component" "agent"). */}}
{{- define "gpuslice.labels" -}}
{{ include "gpuslice.selectorLabels" . }}
app.kubernetes.io/part-of: gpuslice
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end -}}

{{- define "gpuslice.selectorLabels" -}}
app.kubernetes.io/name: gpuslice
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpuslice.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The webhook's identity, as the API server names it. */}}
{{- define "gpuslice.webhookUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "gpuslice.fullname" . }}-webhook
{{- end -}}

{{/* The API server's address for in-cluster configurations, when set. */}}
{{- define "gpuslice.apiServerEnv" -}}
{{- if .Values.apiServer.host -}}
- {name: KUBERNETES_SERVICE_HOST, value: {{ .Values.apiServer.host | quote }}}
{{ end -}}
{{- if .Values.apiServer.port -}}
- {name: KUBERNETES_SERVICE_PORT, value: {{ .Values.apiServer.port | toString | quote }}}
{{ end -}}
{{- end -}}

{{/*
"true" when the ServiceMonitor (and its Service) are rendered: the
cluster has the ServiceMonitor CRD (Helm's discovery lists each kind as
group/version/Kind), not only some other kind of monitoring.coreos.com/v1,
with which applying a ServiceMonitor would fail the whole install.
*/}}
{{- define "gpuslice.serviceMonitor" -}}
{{- if and .Values.agent.enabled .Values.metrics.enabled .Values.metrics.serviceMonitor.enabled (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor") -}}
true
{{- end -}}
{{- end -}}

{{/*
The agent's metricsAddress: config.metricsAddress when set, else
metrics.host:metrics.port ("" when metrics are off).
*/}}
{{- define "gpuslice.metricsAddress" -}}
{{- if hasKey .Values.config "metricsAddress" -}}
{{- .Values.config.metricsAddress -}}
{{- else if .Values.metrics.enabled -}}
{{- $host := .Values.metrics.host | default (ternary "0.0.0.0" "127.0.0.1" (eq (include "gpuslice.serviceMonitor" .) "true")) -}}
{{- printf "%s:%d" $host (int .Values.metrics.port) -}}
{{- end -}}
{{- end -}}

{{/* The metrics port the agent listens on, from its address ("" when none). */}}
{{- define "gpuslice.metricsPort" -}}
{{- $addr := include "gpuslice.metricsAddress" . -}}
{{- if $addr -}}
{{- regexReplaceAll "^.*:" $addr "" -}}
{{- end -}}
{{- end -}}

{{/* The agent's config.yaml: the config block, metricsAddress filled in. */}}
{{- define "gpuslice.agentConfig" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $_ := set $cfg "metricsAddress" (include "gpuslice.metricsAddress" .) -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* dir is a path's directory. */}}
{{- define "gpuslice.dir" -}}
{{- $d := dir . -}}
{{- if eq $d "." }}/{{ else }}{{ $d }}{{ end -}}
{{- end -}}

{{/*
The agent's host paths, as a JSON list of {name, path, type, readOnly}:
every path of its configuration is a host path, mounted at the same path
in its container (it hands them to containerd as mount sources, and the
kubelet dials the DRA sockets by them). A path met twice is mounted once,
the first time (read-write ones come first).
*/}}
{{- define "gpuslice.hostPaths" -}}
{{- $c := .Values.config -}}
{{- $root := trimSuffix "/" ($c.deviceRoot | default "/") -}}
{{- $all := list
  (dict "name" "state" "path" $c.stateDir "type" "DirectoryOrCreate" "readOnly" false)
  (dict "name" "ledger" "path" $c.ledgerDir "type" "DirectoryOrCreate" "readOnly" false)
  (dict "name" "sched" "path" $c.schedDir "type" "DirectoryOrCreate" "readOnly" false) -}}
{{- if $c.statusSocket -}}
{{- $all = append $all (dict "name" "status" "path" (include "gpuslice.dir" $c.statusSocket) "type" "DirectoryOrCreate" "readOnly" false) -}}
{{- end -}}
{{- $all = concat $all (list
  (dict "name" "dev" "path" (printf "%s/dev" $root) "type" "Directory" "readOnly" false)
  (dict "name" "kubelet-plugins" "path" (printf "%s/plugins" (trimSuffix "/" $c.kubeletRootDir)) "type" "DirectoryOrCreate" "readOnly" false)
  (dict "name" "kubelet-registry" "path" (printf "%s/plugins_registry" (trimSuffix "/" $c.kubeletRootDir)) "type" "DirectoryOrCreate" "readOnly" false)
  (dict "name" "dra-cdi" "path" $c.draCDIDir "type" "DirectoryOrCreate" "readOnly" false)
  (dict "name" "nri" "path" (include "gpuslice.dir" .Values.nri.socket) "type" "Directory" "readOnly" false)) -}}
{{- $all = append $all (dict "name" "shim" "path" (include "gpuslice.dir" $c.shim) "type" "DirectoryOrCreate" "readOnly" true) -}}
{{- range $i, $d := $c.cdiSpecDirs -}}
{{- $all = append $all (dict "name" (printf "cdi-%d" $i) "path" $d "type" "DirectoryOrCreate" "readOnly" true) -}}
{{- end -}}
{{- if or (ne $c.enforcement "file") (ne ($c.guard | default "required") "off") -}}
{{/* The host's cgroup hierarchy, whatever the runtime's cgroupns: the module's and the guard's. */}}
{{- $all = append $all (dict "name" "cgroup" "path" "/sys/fs/cgroup" "type" "Directory" "readOnly" true) -}}
{{- end -}}
{{- if ne ($c.guard | default "required") "off" -}}
{{/* The active LSM list (securityfs), which the guard checks before it loads. */}}
{{- $all = append $all (dict "name" "lsm" "path" "/sys/kernel/security" "type" "Directory" "readOnly" true) -}}
{{- end -}}
{{- $seen := dict -}}
{{- $out := list -}}
{{- range $all -}}
{{- $p := trimSuffix "/" .path | default "/" -}}
{{- if not (hasKey $seen $p) -}}
{{- $_ := set $seen $p true -}}
{{- $out = append $out (set . "path" $p) -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The webhook's TLS mode, auto resolved: certManager, helm or secret. */}}
{{- define "gpuslice.tlsMode" -}}
{{- $m := .Values.webhook.tls.mode -}}
{{- if eq $m "auto" -}}
{{- ternary "certManager" "helm" (.Capabilities.APIVersions.Has "cert-manager.io/v1") -}}
{{- else -}}
{{- $m -}}
{{- end -}}
{{- end -}}

{{/* The Secret of the webhook's serving certificate. */}}
{{- define "gpuslice.webhookSecret" -}}
{{- if eq (include "gpuslice.tlsMode" .) "secret" -}}
{{- required "webhook.tls.secretName: give the Secret (tls.crt, tls.key) of tls.mode secret" .Values.webhook.tls.secretName -}}
{{- else -}}
{{- include "gpuslice.fullname" . }}-webhook-tls
{{- end -}}
{{- end -}}
