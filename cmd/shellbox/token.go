package main

import (
	"crypto/rand"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/shellbox/shellbox/server"
)

func newTokenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "token [TOKEN]",
		Short: "Make a bearer token (or hash a given one) for server.tenants",
		Long: `Print a new random bearer token and its hash. Give the token to the tenant,
put only the hash in the config (server.tenants.NAME.tokens); the server never
stores or logs tokens. With TOKEN, print that token's hash.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			if len(args) == 1 {
				fmt.Fprintln(out, server.HashToken(args[0]))
				return nil
			}
			tok := "sbx_" + rand.Text() + rand.Text()
			fmt.Fprintf(out, "token: %s\nhash:  %s\n", tok, server.HashToken(tok))
			return nil
		},
	}
}
