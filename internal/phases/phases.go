// Package phases runs one pass of a reconciler as a list of named phases:
// small functions over the pass's state, each leaving what the next needs,
// as Cluster API's and Karpenter's reconcilers are written.
package phases

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
)

// Phase is one named step of a pass over P (the pass's state). A phase
// that is done ends the pass with its result and error; an error ends it
// too. The phases after it run at the next pass.
type Phase[P any] struct {
	Name string
	Run  func(ctx context.Context, p P) (res ctrl.Result, done bool, err error)
}

// Run runs list in order over p until a phase ends the pass, and returns
// that phase's result and error, and its name; ended is false when every
// phase ran without ending it.
func Run[P any](ctx context.Context, p P, list []Phase[P]) (res ctrl.Result, name string, ended bool, err error) {
	for _, ph := range list {
		if res, done, err := ph.Run(ctx, p); done || err != nil {
			return res, ph.Name, true, err
		}
	}
	return ctrl.Result{}, "", false, nil
}
