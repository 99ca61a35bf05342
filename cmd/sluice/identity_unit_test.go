package main

import "testing"

func TestNormalizeURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8080/v1/":              "http://127.0.0.1:8080/v1",
		"HTTPS://API.OpenAI.com/v1":              "https://api.openai.com/v1",
		" https://api.openai.com/v1 ":            "https://api.openai.com/v1",
		"https://user:s3cret@proxy.example/v1":   "https://proxy.example/v1",
		"https://RES.openai.azure.com/openai/v1": "https://res.openai.azure.com/openai/v1",
	} {
		if got := normalizeURL(in); got != want {
			t.Errorf("normalizeURL(%q) = %q, want %q", in, got, want)
		}
	}
}
