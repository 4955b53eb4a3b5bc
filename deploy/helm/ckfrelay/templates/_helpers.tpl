{{/* Names and labels. */}}
{{- define "ckfrelay.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ckfrelay.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: call with (list $ "relay"). */}}
{{- define "ckfrelay.selector" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ $.Chart.Name }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "ckfrelay.image" -}}
{{- $tag := toString .Values.image.tag -}}
{{- if or (eq $tag "") (eq $tag "latest") -}}
{{- fail "image.tag must name a release (not empty, not latest)" -}}
{{- end -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{- define "ckfrelay.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
fsGroup: {{ .Values.securityContext.fsGroup }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "ckfrelay.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The name of a role's NATS credentials Secret: (list $ "relay"). */}}
{{- define "ckfrelay.authSecret" -}}
{{- $ := index . 0 -}}
{{- $a := index $.Values.auth (index . 1) -}}
{{- if $a.existingSecret -}}{{ $a.existingSecret }}{{- else -}}{{ include "ckfrelay.fullname" $ }}-{{ index . 1 }}-nats{{- end -}}
{{- end -}}

{{- define "ckfrelay.tlsSecret" -}}
{{- if .Values.nats.tls.existingSecret -}}{{ .Values.nats.tls.existingSecret }}{{- else -}}{{ include "ckfrelay.fullname" . }}-nats-tls{{- end -}}
{{- end -}}

{{/* The connection, logging and security flags every binary shares
(internal/cli): (list $ "relay"). The bridge's JetStream is its DC leaf's
(its resume points beside the KVEVENTS it feeds); the others' the hub's. */}}
{{- define "ckfrelay.natsArgs" -}}
{{- $ := index . 0 -}}
{{- $a := index $.Values.auth (index . 1) -}}
- --nats-url={{ required "nats.url is required" $.Values.nats.url }}
{{- if eq (index . 1) "bridge" }}
- --js-domain={{ $.Values.dc.inputJsDomain }}
- --js-replicas={{ $.Values.dc.inputJsReplicas }}
{{- else }}
- --js-domain={{ $.Values.nats.jsDomain }}
- --js-replicas={{ $.Values.nats.jsReplicas }}
{{- end }}
- --nats-connect-timeout={{ $.Values.nats.connectTimeout }}
- --log-format={{ $.Values.logFormat }}
- --log-level={{ $.Values.logLevel }}
{{- if eq $a.type "password" }}
- --nats-user={{ required "auth: a password role needs user" $a.user }}
- --nats-password-file=/etc/ckfrelay/nats/{{ $a.key }}
{{- else if eq $a.type "creds" }}
- --nats-creds=/etc/ckfrelay/nats/{{ $a.key }}
{{- else if ne $a.type "none" }}
{{- fail (printf "auth.%s.type must be none, password or creds" (index . 1)) }}
{{- end }}
{{- if $.Values.nats.tls.enabled }}
- --nats-tls-ca=/etc/ckfrelay/tls/{{ $.Values.nats.tls.caKey }}
{{- if or $.Values.nats.tls.existingSecret $.Values.nats.tls.cert }}
- --nats-tls-cert=/etc/ckfrelay/tls/{{ $.Values.nats.tls.certKey }}
- --nats-tls-key=/etc/ckfrelay/tls/{{ $.Values.nats.tls.keyKey }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "ckfrelay.natsMounts" -}}
{{- $ := index . 0 -}}
{{- $a := index $.Values.auth (index . 1) -}}
{{- if ne $a.type "none" }}
- name: nats-auth
  mountPath: /etc/ckfrelay/nats
  readOnly: true
{{- end }}
{{- if $.Values.nats.tls.enabled }}
- name: nats-tls
  mountPath: /etc/ckfrelay/tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "ckfrelay.natsVolumes" -}}
{{- $ := index . 0 -}}
{{- $a := index $.Values.auth (index . 1) -}}
{{- if ne $a.type "none" }}
- name: nats-auth
  secret:
    secretName: {{ include "ckfrelay.authSecret" . }}
    defaultMode: 0440
{{- end }}
{{- if $.Values.nats.tls.enabled }}
- name: nats-tls
  secret:
    secretName: {{ include "ckfrelay.tlsSecret" $ }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{/* Spread a component's pods over topologyKey: (list $ "relay"). */}}
{{- define "ckfrelay.topologySpread" -}}
{{- $ := index . 0 -}}
{{- if $.Values.topologySpread.enabled }}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: {{ $.Values.topologySpread.topologyKey }}
    whenUnsatisfiable: {{ $.Values.topologySpread.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "ckfrelay.selector" . | nindent 8 }}
{{- end }}
{{- end -}}

{{- define "ckfrelay.scheduling" -}}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
