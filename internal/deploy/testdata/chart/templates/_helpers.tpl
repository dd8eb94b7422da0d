{{- define "web.name" -}}{{ .Chart.Name }}{{- end -}}
