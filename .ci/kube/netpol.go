//go:build ignore

// Command kube-router is the CI cluster's NetworkPolicy enforcement: kube-router's
// own NetworkPolicy controller (github.com/cloudnativelabs/kube-router/v2,
// pkg/controllers/netpol) and health check, started as its cmd/kube-router
// starts them with --run-firewall=true --run-router=false
// --run-service-proxy=false, which is all the cluster runs of it. Built
// without the router and the service proxy (GoBGP, IPVS: 40% of the
// command's Go source), in the module of the Kubernetes binaries, on their
// client-go: .ci/setup-kube.sh copies it there ("ignore": never built in
// shellbox's module, which does not require kube-router).
//
// Its flags are kube-router's (options.KubeRouterConfig); one asking for
// anything but the firewall is refused.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cloudnativelabs/kube-router/v2/pkg/controllers/netpol"
	"github.com/cloudnativelabs/kube-router/v2/pkg/healthcheck"
	"github.com/cloudnativelabs/kube-router/v2/pkg/options"
	"github.com/cloudnativelabs/kube-router/v2/pkg/version"
	"github.com/spf13/pflag"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "kube-router: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	klog.InitFlags(nil)
	config := options.NewKubeRouterConfig()
	config.AddFlags(pflag.CommandLine)
	pflag.Parse()
	if err := flag.CommandLine.Parse(nil); err != nil {
		return fmt.Errorf("parsing flags: %w", err)
	}
	if err := flag.Set("logtostderr", "true"); err != nil {
		return err
	}
	if err := flag.Set("v", config.VLevel); err != nil {
		return err
	}
	switch {
	case config.HelpRequested:
		pflag.Usage()
		return nil
	case config.Version:
		version.PrintVersion(false)
		return nil
	case config.RunRouter || config.RunServiceProxy || config.RunLoadBalancer || config.CleanupConfig:
		return errors.New("this build has only the NetworkPolicy controller: --run-router, --run-service-proxy, --run-loadbalancer and --cleanup-config must be false")
	case !config.RunFirewall:
		return errors.New("--run-firewall=false: nothing to run")
	case os.Geteuid() != 0:
		return errors.New("needs root, to run iptables and ipset")
	}
	version.PrintVersion(true)

	var rc *rest.Config
	var err error
	if config.Master != "" || config.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags(config.Master, config.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("client configuration: %w", err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}

	// What kube-router's Run does for the firewall alone.
	var ipsetMutex sync.Mutex
	var wg sync.WaitGroup
	healthChan := make(chan *healthcheck.ControllerHeartbeat, 10)
	stopCh := make(chan struct{})
	hc, err := healthcheck.NewHealthController(config)
	if err != nil {
		return fmt.Errorf("health controller: %w", err)
	}
	wg.Add(1)
	go hc.RunServer(stopCh, &wg)

	factory := informers.NewSharedInformerFactory(client, 0)
	podInformer := factory.Core().V1().Pods().Informer()
	nsInformer := factory.Core().V1().Namespaces().Informer()
	npInformer := factory.Networking().V1().NetworkPolicies().Informer()
	factory.Start(stopCh)
	synced := make(chan struct{})
	go func() { factory.WaitForCacheSync(stopCh); close(synced) }()
	select {
	case <-synced:
	case <-time.After(config.CacheSyncTimeout):
		return fmt.Errorf("informer caches not synced after %s", config.CacheSyncTimeout)
	}
	hc.SetAlive()
	wg.Add(1)
	go hc.RunCheck(healthChan, stopCh, &wg)

	iptables, ipsets, err := netpol.NewIPTablesHandlers(config)
	if err != nil {
		return fmt.Errorf("iptables handlers: %w", err)
	}
	npc, err := netpol.NewNetworkPolicyController(client, config, podInformer, npInformer, nsInformer,
		&ipsetMutex, iptables, ipsets)
	if err != nil {
		return fmt.Errorf("network policy controller: %w", err)
	}
	if _, err := podInformer.AddEventHandler(npc.PodEventHandler); err != nil {
		return fmt.Errorf("pod event handler: %w", err)
	}
	if _, err := nsInformer.AddEventHandler(npc.NamespaceEventHandler); err != nil {
		return fmt.Errorf("namespace event handler: %w", err)
	}
	if _, err := npInformer.AddEventHandler(npc.NetworkPolicyEventHandler); err != nil {
		return fmt.Errorf("network policy event handler: %w", err)
	}
	wg.Add(1)
	go npc.Run(healthChan, stopCh, &wg)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
	klog.Info("shutting down the controllers")
	close(stopCh)
	wg.Wait()
	close(healthChan)
	return nil
}
