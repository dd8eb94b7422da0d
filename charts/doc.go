// Package charts holds fke's Helm charts (fke/: fke-manager and the fke.dev
// CRDs for an existing Kubernetes cluster). Its tests load, lint and render
// them as Helm does; the charts themselves are plain files.
package charts
