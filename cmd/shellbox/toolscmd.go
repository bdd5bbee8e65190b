package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/shellbox/shellbox/tools"
)

func newToolsCmd() *cobra.Command {
	var schema bool
	var format string
	cmd := &cobra.Command{
		Use:   "tools",
		Short: "List the tools, or print their definitions with --schema",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			// Definitions are pure: no backend is started to print them.
			ts, err := tools.New(nil, tools.Config{DisableRunInBackground: !cfg.EnableRunInBackground})
			if err != nil {
				return err
			}
			defer ts.Close()
			defs := ts.AllDefinitions()
			out := cmd.OutOrStdout()
			if !schema {
				for _, d := range defs {
					fmt.Fprintln(out, d.Name)
				}
				return nil
			}
			var v any = defs
			switch format {
			case "mcp":
			case "openai":
				fns := make([]map[string]any, len(defs))
				for i, d := range defs {
					fns[i] = d.Function()
				}
				v = fns
			default:
				return fmt.Errorf("unknown --format %q (want mcp or openai)", format)
			}
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			return enc.Encode(v)
		},
	}
	cmd.Flags().BoolVar(&schema, "schema", false, "print the tool definitions as JSON")
	cmd.Flags().StringVar(&format, "format", "mcp", "definition format: mcp (name, description, inputSchema) or openai (function definitions)")
	return cmd
}
