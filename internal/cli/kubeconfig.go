package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

func newKubeconfigCmd(g *globals) *cobra.Command {
	var merge bool
	cmd := &cobra.Command{
		Use:   "kubeconfig NAME",
		Short: "Print a cluster's admin kubeconfig, or merge it into your kubeconfig",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			name := args[0]
			cl, err := g.getCluster(cmd.Context(), c, name)
			if err != nil {
				return err
			}
			s := &corev1.Secret{}
			if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: g.namespace, Name: fkev1.KubeconfigSecretName(name)}, s); err != nil {
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("cluster %s has no kubeconfig yet (phase %s): wait with `fke cluster get %s`", name, orDash(cl.Status.Phase), name)
				}
				return explain(err, "kubeconfig")
			}
			data := s.Data[fkev1.KubeconfigKey]
			if !merge {
				_, err := g.out.Write(data)
				return err
			}
			path, err := mergeKubeconfig(data, "fke-"+name)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.out, "merged context fke-%s into %s and made it current\n", name, path)
			return nil
		},
	}
	cmd.Flags().BoolVar(&merge, "merge", false, "merge into $KUBECONFIG (or ~/.kube/config) as context fke-NAME and switch to it")
	return cmd
}

// mergeKubeconfig adds the cluster, user and context of data under name to
// the user's kubeconfig file and makes it current.
func mergeKubeconfig(data []byte, name string) (string, error) {
	in, err := clientcmd.Load(data)
	if err != nil {
		return "", fmt.Errorf("decoding kubeconfig: %w", err)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	path := rules.GetDefaultFilename()
	if env := os.Getenv("KUBECONFIG"); env != "" {
		path = filepath.SplitList(env)[0]
	}
	cur, err := clientcmd.LoadFromFile(path)
	if err != nil {
		if !os.IsNotExist(err) {
			return "", fmt.Errorf("reading %s: %w", path, err)
		}
		cur = clientcmdapi.NewConfig()
	}
	ctx := in.Contexts[in.CurrentContext]
	if ctx == nil {
		return "", fmt.Errorf("kubeconfig has no current context")
	}
	cur.Clusters[name] = in.Clusters[ctx.Cluster]
	cur.AuthInfos[name] = in.AuthInfos[ctx.AuthInfo]
	ctxCopy := *ctx
	ctxCopy.Cluster, ctxCopy.AuthInfo = name, name
	cur.Contexts[name] = &ctxCopy
	cur.CurrentContext = name
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	if err := clientcmd.WriteToFile(*cur, path); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}
