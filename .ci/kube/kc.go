// Command kc is the little of kubectl that the CI cluster's setup
// (.ci/setup-kube.sh) asks of the API server, on client-go, which this
// module compiles anyway: the CI then builds no kubectl (193 packages no
// other Kubernetes binary needs, kustomize among them: about 5% of the
// Kubernetes build):
//
//	kc -kubeconfig F apply < OBJECTS.yaml    server-side apply of each document
//	kc -kubeconfig F ready NODE SINCE        exit 0 when NODE is Ready, that
//	                                         condition's heartbeat at or after
//	                                         SINCE (Unix seconds)
//	kc -kubeconfig F serviceaccount NS NAME  exit 0 when it exists
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig file")
	flag.Parse()
	if err := run(*kubeconfig, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "kc:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string, args []string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	switch {
	case len(args) == 1 && args[0] == "apply":
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return err
		}
		disc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			return err
		}
		return apply(ctx, dyn, restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)), os.Stdin)
	case len(args) == 3 && args[0] == "ready":
		since, err := strconv.ParseInt(args[2], 10, 64)
		if err != nil {
			return fmt.Errorf("SINCE %q: %w", args[2], err)
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, args[1], metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && c.LastHeartbeatTime.Unix() >= since {
				return nil
			}
		}
		return fmt.Errorf("node %s is not Ready (or not since %d)", args[1], since)
	case len(args) == 3 && args[0] == "serviceaccount":
		_, err := cs.CoreV1().ServiceAccounts(args[1]).Get(ctx, args[2], metav1.GetOptions{})
		return err
	}
	return errors.New("usage: kc -kubeconfig F apply | ready NODE SINCE | serviceaccount NS NAME")
}

// apply applies each YAML document of r (server-side, field manager
// shellbox-ci, taking over conflicting fields as kubectl apply would).
func apply(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, r io.Reader) error {
	dec := yaml.NewYAMLOrJSONDecoder(r, 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s: %w", gvk, err)
		}
		var res dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			res = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		if _, err := res.Apply(ctx, obj.GetName(), &obj, metav1.ApplyOptions{FieldManager: "shellbox-ci", Force: true}); err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
	}
}
