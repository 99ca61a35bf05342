package emulator

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// middleware sets the per-family request-id header, enforces auth, and
// injects slow calls and faults. /_emulator/ paths are exempt.
func (s *Server) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fam := familyOf(r.URL.Path)
		if fam == famInternal {
			next.ServeHTTP(w, r)
			return
		}
		n := int(s.calls.Add(1))
		s.bump(func(st *Stats) { st.APICalls++; st.InFlight++ })
		defer s.bump(func(st *Stats) { st.InFlight-- })
		switch fam {
		case famOpenAI:
			w.Header().Set("x-request-id", "req_"+hexID(s.opts.Seed, "call", "", n, 16))
			w.Header().Set("openai-processing-ms", "1")
		case famAnthropic:
			w.Header().Set("request-id", "req_01"+b58ID(s.opts.Seed, "call", "", n, 22))
		case famCloudflare:
			w.Header().Set("cf-ray", hexID(s.opts.Seed, "call", "", n, 8)+"-EMU")
		case famMistral, famTogether:
			w.Header().Set("x-request-id", hexID(s.opts.Seed, "call", "", n, 16))
		}
		efam := errorFamily(r.URL.Path)
		if fam == famCloudflare && cfEncodedSlash(r) {
			cfError(w, http.StatusBadRequest, 7000, "No route for that URI")
			return
		}
		if !s.authorized(w, r, fam) {
			return
		}
		slow, fault := s.drawFault(r)
		if slow {
			s.bump(func(st *Stats) { st.SlowCalls++ })
			if !sleepCtx(r.Context(), s.opts.SlowDelay) {
				return
			}
		}
		if fault == "" {
			next.ServeHTTP(w, r)
			return
		}
		s.bump(func(st *Stats) { st.FaultsInjected++ })
		s.logf("emulator: injecting fault %s on %s %s", fault, r.Method, r.URL.Path)
		switch fault {
		case "429":
			s.bump(func(st *Stats) { st.Faults429++ })
			ra := s.opts.RetryAfter
			w.Header().Set("Retry-After", strconv.FormatInt(int64((ra+time.Second-1)/time.Second), 10))
			w.Header().Set("retry-after-ms", strconv.FormatInt(ra.Milliseconds(), 10))
			if fam == famOpenAI {
				w.Header().Set("x-ratelimit-remaining-requests", "0")
				w.Header().Set("x-ratelimit-reset-requests", ra.String())
			}
			familyError(w, efam, http.StatusTooManyRequests,
				"Rate limit reached (injected by the emulator). Please try again later.")
		case "reset":
			s.bump(func(st *Stats) { st.FaultsReset++ })
			s.serveThenReset(w, r, next)
		default:
			s.bump(func(st *Stats) { st.Faults5xx++ })
			code, _ := strconv.Atoi(fault)
			familyError(w, efam, code, "The server had an error while processing your request (injected by the emulator).")
		}
	})
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// drawFault decides, deterministically from the seed and the call order,
// whether this call is slow and which fault (if any) it gets; with
// Options.FaultScript, the script names the fault.
func (s *Server) drawFault(r *http.Request) (slow bool, fault string) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	uSlow, uFault, k := s.faultRNG.Float64(), s.faultRNG.Float64(), s.faultRNG.IntN(1<<30)
	slow = uSlow < s.opts.SlowRate
	if s.opts.FaultScript != nil {
		fault = s.opts.FaultScript(r.Method, r.URL.Path)
		if !slices.Contains(allFaultKinds, fault) {
			fault = ""
		}
	} else if uFault < s.opts.HTTPFaultRate {
		fault = s.opts.FaultKinds[k%len(s.opts.FaultKinds)]
	}
	return
}

// authorized enforces Options.APIKey in each family's own way and writes
// the family's 401 (or 400) envelope when it fails.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request, fam string) bool {
	key := s.opts.APIKey
	if fam == famCloudflare && !cfHasCredentials(r) {
		// Even when any key goes: the live API refuses a call that
		// carries none, 400 code 9106.
		cfError(w, http.StatusBadRequest, 9106, "Missing X-Auth-Key, X-Auth-Email or Authorization headers")
		return false
	}
	if fam == famBedrock {
		return s.bedrockAuthorized(w, r) // SigV4, checked whenever the emulator knows a secret
	}
	if key == "" {
		return true
	}
	bearer, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch fam {
	case famAnthropic:
		if r.Header.Get("x-api-key") != key {
			antError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
			return false
		}
		if r.Header.Get("anthropic-version") == "" {
			antError(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
			return false
		}
	case famCloudflare:
		if bearer != key {
			cfError(w, http.StatusUnauthorized, 10000, "Authentication error")
			return false
		}
	case famMistral:
		if bearer != key {
			mistralError(w, http.StatusUnauthorized, "unauthorized", "Unauthorized")
			return false
		}
	case famXAI:
		if bearer != key {
			xaiError(w, http.StatusUnauthorized, "Incorrect API key provided. Obtain an API key from https://console.x.ai.")
			return false
		}
	case famTogether:
		if strings.HasPrefix(r.URL.Path, togetherUploadPath) {
			return true // a signed URL: its signature is checked by the handler
		}
		if bearer != key {
			msg := "Invalid API key provided. You can find your API key at https://api.together.xyz/settings/api-keys."
			if errorFamily(r.URL.Path) == famTogether {
				togetherError(w, http.StatusUnauthorized, msg)
			} else {
				oaiError(w, http.StatusUnauthorized, "invalid_request_error", msg, "", "invalid_api_key")
			}
			return false
		}
	case famGemini:
		// Google answers a wrong key 400 INVALID_ARGUMENT (reason
		// API_KEY_INVALID) and a missing one 403 PERMISSION_DENIED.
		got := r.Header.Get("x-goog-api-key")
		if got == "" {
			got = r.URL.Query().Get("key")
		}
		switch {
		case got == "":
			gemErrorStatus(w, http.StatusForbidden, "PERMISSION_DENIED",
				"Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.")
			return false
		case got != key:
			gemErrorStatus(w, http.StatusBadRequest, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.",
				map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
					"domain": "googleapis.com", "metadata": map[string]any{"service": "generativelanguage.googleapis.com"}})
			return false
		}
	case famVertex:
		// Google Cloud answers a refused OAuth2 token 401 UNAUTHENTICATED.
		if bearer != key {
			gemErrorStatus(w, http.StatusUnauthorized, "UNAUTHENTICATED",
				"Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
			return false
		}
	default:
		if bearer != key && r.Header.Get("api-key") != key {
			shown := bearer
			if shown == "" {
				shown = r.Header.Get("api-key")
			}
			if len(shown) > 8 {
				shown = shown[:3] + "*****" + shown[len(shown)-4:]
			}
			msg := "Incorrect API key provided: " + shown + "."
			if shown == "" {
				msg = "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
			}
			oaiError(w, http.StatusUnauthorized, "invalid_request_error", msg, "", "invalid_api_key")
			return false
		}
	}
	return true
}

// captureWriter records a handler's response (body capped) so the fault
// injector can send only part of it.
type captureWriter struct {
	h      http.Header
	status int
	buf    []byte
	n      int64
}

const captureCap = 64 << 10

func (c *captureWriter) Header() http.Header { return c.h }
func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}
func (c *captureWriter) Write(p []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	if room := captureCap - len(c.buf); room > 0 {
		c.buf = append(c.buf, p[:min(room, len(p))]...)
	}
	c.n += int64(len(p))
	return len(p), nil
}

// serveThenReset runs the handler for real (its side effects happen: a batch
// is created, a file stored) and then cuts the connection in the middle of
// the response body with a TCP RST.
func (s *Server) serveThenReset(w http.ResponseWriter, r *http.Request, next http.Handler) {
	cw := &captureWriter{h: w.Header().Clone()}
	next.ServeHTTP(cw, r)
	if cw.status == 0 {
		cw.status = http.StatusOK
	}
	full := cw.n
	if full < 2 {
		full = 2
	}
	cut := cw.buf[:min(len(cw.buf), int(full/2))]
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): abort the stream instead.
		for k, v := range cw.h {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Length", strconv.FormatInt(full, 10))
		w.WriteHeader(cw.status)
		w.Write(cut)
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}
	defer conn.Close()
	cw.h.Set("Content-Length", strconv.FormatInt(full, 10))
	cw.h.Del("Transfer-Encoding")
	bw := bufio.NewWriter(conn)
	fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\n", cw.status, http.StatusText(cw.status))
	cw.h.Write(bw)
	bw.WriteString("\r\n")
	bw.Write(cut)
	bw.Flush()
	_ = brw
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0) // close with RST: "connection reset by peer"
	}
}
