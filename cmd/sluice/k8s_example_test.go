package main

import (
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestKubernetesExampleIsValid: examples/k8s/cronjob.yaml, which README
// tells users to apply, is valid YAML of a CronJob whose container runs
// `sluice run` with flags this binary has, with the scale-out flags
// (--db from the secret, --store, --join, --state) that an ephemeral pod
// needs.
func TestKubernetesExampleIsValid(t *testing.T) {
	b, err := os.ReadFile("../../examples/k8s/cronjob.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Kind string `yaml:"kind"`
		Spec struct {
			JobTemplate struct {
				Spec struct {
					Parallelism int `yaml:"parallelism"`
					Template    struct {
						Spec struct {
							Containers []struct {
								Args    []string `yaml:"args"`
								EnvFrom []struct {
									SecretRef struct {
										Name string `yaml:"name"`
									} `yaml:"secretRef"`
								} `yaml:"envFrom"`
							} `yaml:"containers"`
						} `yaml:"spec"`
					} `yaml:"template"`
				} `yaml:"spec"`
			} `yaml:"jobTemplate"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("cronjob.yaml: %v", err)
	}
	if doc.Kind != "CronJob" {
		t.Fatalf("kind %q, want CronJob", doc.Kind)
	}
	js := doc.Spec.JobTemplate.Spec
	if js.Parallelism < 2 {
		t.Errorf("parallelism %d: the example is of several workers on one job", js.Parallelism)
	}
	cs := js.Template.Spec.Containers
	if len(cs) != 1 || len(cs[0].Args) < 2 || cs[0].Args[0] != "run" {
		t.Fatalf("containers %+v: want one container running `sluice run`", cs)
	}
	if len(cs[0].EnvFrom) == 0 || cs[0].EnvFrom[0].SecretRef.Name == "" {
		t.Errorf("the container takes no secret: SLUICE_DB and keys must come from one")
	}
	run := newRunCmd(&globalFlags{})
	root := newRootCmd()
	seen := map[string]bool{}
	for _, a := range cs[0].Args[1:] {
		if !strings.HasPrefix(a, "--") {
			if !strings.HasPrefix(a, "s3://") {
				t.Errorf("argument %q: the example reads its input from S3", a)
			}
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if run.Flags().Lookup(name) == nil && root.PersistentFlags().Lookup(name) == nil {
			t.Errorf("flag --%s in cronjob.yaml is not a flag of sluice run", name)
		}
		seen[name] = true
	}
	for _, want := range []string{"out", "store", "state", "join"} {
		if !seen[want] {
			t.Errorf("cronjob.yaml does not pass --%s", want)
		}
	}
}
