package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice/provider"
)

// providerInfo is one row of `sluice providers --json`.
type providerInfo struct {
	Name              string   `json:"name"`
	Family            string   `json:"family"`
	BaseURL           string   `json:"base_url"`
	BaseURLEnv        string   `json:"base_url_env,omitempty"`
	KeyEnv            []string `json:"key_env"`
	AccountEnv        string   `json:"account_env,omitempty"`
	MaxBatchBytes     int64    `json:"max_batch_bytes"`
	MaxBatchRequests  int      `json:"max_batch_requests"`
	MaxLiveBatches    int      `json:"max_live_batches"`
	MaxEnqueuedTokens int64    `json:"max_enqueued_tokens"`
	MinBatchRequests  int      `json:"min_batch_requests,omitempty"`
	Window            string   `json:"window"`
	RequestsPerSecond float64  `json:"requests_per_second"`
	InputFormat       string   `json:"input_format"`
	Endpoints         []string `json:"endpoints"`
	MaxCustomID       int      `json:"max_custom_id,omitempty"`
	Notes             string   `json:"notes"`
	Quirks            []string `json:"quirks,omitempty"`
}

func newProvidersCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "providers",
		Short: "List the providers sluice knows, with their default limits and the input each accepts",
		Long: `providers prints the table of provider presets: base URL and the variable that
overrides it, the credential variables, the default limits per batch (each
overridable with --max-batch-bytes, --max-batch-requests, --max-live-batches,
--max-enqueued-tokens), the batch window, the client-side API call rate
(--rate), the input each accepts (the url values of input lines, and what
their body is), and the quirks of its API. 0 means no limit.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return printProviders(cmd.OutOrStdout(), asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array, one object per provider")
	return cmd
}

func providerInfos() []providerInfo {
	var out []providerInfo
	for _, name := range provider.Names() {
		p := provider.Presets[name]
		out = append(out, providerInfo{
			Name: p.Name, Family: string(p.Family), BaseURL: p.BaseURL, BaseURLEnv: p.BaseURLEnv,
			KeyEnv: append([]string{}, p.KeyEnv...), AccountEnv: p.AccountEnv,
			MaxBatchBytes: p.Limits.MaxBatchBytes, MaxBatchRequests: p.Limits.MaxBatchRequests,
			MaxLiveBatches: p.Limits.MaxLiveBatches, MaxEnqueuedTokens: p.Limits.MaxEnqueuedTokens,
			MinBatchRequests: p.Limits.MinBatchRequests, Window: p.Window, RequestsPerSecond: p.RequestsPerSecond, InputFormat: p.InputFormat,
			Endpoints: append([]string{}, p.Endpoints...), MaxCustomID: p.MaxCustomID, Notes: p.Notes, Quirks: p.Quirks,
		})
	}
	return out
}

func printProviders(w io.Writer, asJSON bool) error {
	infos := providerInfos()
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(infos)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tFAMILY\tBYTES/BATCH\tREQUESTS/BATCH\tLIVE BATCHES\tWINDOW\tCALLS/S\tKEY\tBASE URL")
	for _, p := range infos {
		base := p.BaseURL
		switch {
		case p.Name == "local":
			base = "(in-process)"
		case base == "":
			base = "(--base-url)"
		}
		if p.BaseURLEnv != "" {
			base += " $" + p.BaseURLEnv
		}
		key := "-"
		if len(p.KeyEnv) > 0 {
			key = keyEnvText(provider.Presets[p.Name])
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%g\t%s\t%s\n", p.Name, p.Family, limitText(p.MaxBatchBytes),
			limitText(int64(p.MaxBatchRequests)), limitText(int64(p.MaxLiveBatches)), p.Window, p.RequestsPerSecond, key, base)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nInput accepted (input lines are always {custom_id, method, url, body}):")
	for _, p := range infos {
		fmt.Fprintf(w, "  %-11s %s\n  %-11s urls: %s\n", p.Name, p.InputFormat, "", strings.Join(p.Endpoints, ", "))
		if p.MaxCustomID > 0 {
			fmt.Fprintf(w, "  %-11s custom_id: at most %d characters\n", "", p.MaxCustomID)
		}
		for _, q := range p.Quirks {
			fmt.Fprintf(w, "  %-11s quirk: %s\n", "", q)
		}
	}
	return nil
}

// limitText is a limit as a number with thousands separators, or "none".
func limitText(n int64) string {
	if n == 0 {
		return "none"
	}
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
