package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/usage"
)

// usageDir is where cfg keeps the usage files.
func usageDir(cfg config.Config) string {
	if cfg.Usage.Dir != "" {
		return cfg.Usage.Dir
	}
	return filepath.Join(cfg.Sandbox.StateDir, "usage")
}

// usageMeter is the Meter of a server on cfg's backend: on docker and
// containerd, whose runtimes read their sandboxes' cgroups, over the dir
// store; on kube, whose runtime reads the kubelets' summaries, over the
// snapshot store's S3 bucket when snapshots.store is s3 (the replicas
// share no disk), else over the server pod's own directory; nil on local,
// which runs no sandbox.
func usageMeter(ctx context.Context, cfg config.Config) (*usage.Meter, error) {
	switch cfg.Backend {
	case "docker", "containerd":
	case "kube":
		if cfg.Snapshots.StoreKind(cfg.Backend) != config.StoreS3 {
			break
		}
		sn := cfg.Snapshots.S3
		secret := sn.SecretKey
		if sn.SecretKeyFile != "" {
			b, err := os.ReadFile(sn.SecretKeyFile)
			if err != nil {
				return nil, fmt.Errorf("usage: snapshots.s3.secretKeyFile: %w", err)
			}
			secret = strings.TrimSpace(string(b))
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		s, err := usage.NewS3(ctx, usage.S3Options{Endpoint: sn.Endpoint, Insecure: sn.Insecure, AccessKey: sn.AccessKey,
			SecretKey: secret, Region: sn.Region, Bucket: sn.Bucket, Prefix: sn.Prefix})
		if err != nil {
			return nil, fmt.Errorf("usage: snapshots.s3: %w", err)
		}
		return usage.NewMeter(s, nil), nil
	default:
		return nil, nil
	}
	return usage.NewMeter(&usage.Dir{Path: usageDir(cfg)}, nil), nil
}

func newUsageCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show what sessions used: sandbox-seconds, CPU-seconds, memory GiB-seconds and peak, calls, workspace, spill and egress bytes (this host's usage files, or a server's with --server)",
		Long: `Show what sessions used, per session, over a range of time (default: today, UTC).

Without --server it reads this host's usage files (usage.dir), every tenant's
unless --tenant names one. With --server it asks the server's GET /v1/usage:
a tenant's token sees its own sessions, an operator token every tenant's.`,
		Args: cobra.NoArgs,
		RunE: runUsage,
	}
	cmd.Flags().String("from", "", "start: an RFC 3339 time or a UTC date (default: the start of today, UTC)")
	cmd.Flags().String("to", "", "end: an RFC 3339 time or a UTC date (default: now)")
	cmd.Flags().String("session", "", "only this session")
	cmd.Flags().String("tenant", "", "only this tenant (an operator's token, or this host's files)")
	cmd.Flags().Bool("csv", false, "print CSV (the columns of GET /v1/usage?format=csv)")
	addRemoteFlags(cmd)
	return cmd
}

func runUsage(cmd *cobra.Command, _ []string) error {
	q := url.Values{}
	for _, f := range []string{"from", "to", "session", "tenant"} {
		if v, _ := cmd.Flags().GetString(f); v != "" {
			q.Set(f, v)
		}
	}
	asCSV, _ := cmd.Flags().GetBool("csv")
	c, err := remote(cmd)
	if err != nil {
		return err
	}
	if c != nil {
		if asCSV {
			return c.UsageCSV(cmd.Context(), q, cmd.OutOrStdout())
		}
		rep, err := c.Usage(cmd.Context(), q)
		if err != nil {
			return err
		}
		return printUsage(cmd.OutOrStdout(), rep.Sessions)
	}
	cfg, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	f, err := usageFilter(q)
	if err != nil {
		return err
	}
	recs, err := usage.NewMeter(&usage.Dir{Path: usageDir(cfg)}, nil).Query(cmd.Context(), f)
	if err != nil {
		return err
	}
	if asCSV {
		return usage.WriteCSV(cmd.OutOrStdout(), recs)
	}
	return printUsage(cmd.OutOrStdout(), recs)
}

// usageFilter reads the flags as GET /v1/usage reads its parameters.
func usageFilter(q url.Values) (usage.Filter, error) {
	now := time.Now().UTC()
	f := usage.Filter{From: now.Truncate(24 * time.Hour), To: now, Session: q.Get("session"), Tenant: q.Get("tenant")}
	for name, into := range map[string]*time.Time{"from": &f.From, "to": &f.To} {
		if v := q.Get(name); v != "" {
			t, err := usage.ParseTime(v)
			if err != nil {
				return f, fmt.Errorf("--%s %q: %w", name, v, err)
			}
			*into = t
		}
	}
	if !f.To.After(f.From) {
		return f, fmt.Errorf("--from (%s) must be before --to (%s)", f.From.Format(time.RFC3339), f.To.Format(time.RFC3339))
	}
	return f, nil
}

func printUsage(w io.Writer, recs []usage.Record) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tSESSION\tSANDBOX-S\tCPU-S\tMEM-GIB-S\tMEM-PEAK-MIB\tCALLS\tCALL-S\tWS-MIB\tWS-PEAK-MIB\tSPILL-B\tEGRESS-REQ\tEGRESS-OUT-B\tEGRESS-IN-B\tENDED")
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.3f\t%.2f\t%.1f\t%d\t%.1f\t%.1f\t%.1f\t%d\t%d\t%d\t%d\t%v\n", r.Tenant, r.Session, r.SandboxSeconds, r.CPUSeconds,
			r.MemoryGiBSeconds, mib(r.MemoryPeakBytes), r.Calls, r.CallSeconds, mib(r.WorkspaceBytes), mib(r.WorkspacePeakBytes),
			r.SpillBytes, r.EgressRequests, r.EgressSentBytes, r.EgressReceivedBytes, r.Final)
	}
	return tw.Flush()
}
