package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	buildversion "github.com/shellbox/shellbox/internal/version"
)

// version is set at build time with -ldflags "-X main.version=…"; otherwise
// the module version (or "devel") is used.
var version = ""

func versionString() string {
	v := buildversion.Of(version)
	return fmt.Sprintf("shellbox %s (%s, %s/%s)", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), versionString())
			return nil
		},
	}
}
