// Package deploy is fke's one applier: it renders a source (plain
// manifests, a kustomization or a Helm chart with values) into objects,
// applies them to a tenant cluster with server-side apply (field manager
// "fke") behind a cli-utils inventory, waits with kstatus until every object
// is Current, explains what keeps an object from getting there, and keeps
// each applied revision in the cluster so an earlier one can be applied
// again.
//
// The decision parts are pure and tested with tables: how a source is
// recognised and parsed (manifest.go), why an object is not Current
// (diagnose.go) and the revision bookkeeping (revision.go). The I/O lives in
// render.go (files, kustomize, Helm), apply.go (cli-utils) and store.go
// (revision Secrets).
package deploy
