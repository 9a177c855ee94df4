// Command golden writes the golden vectors the Python port of the virtual-agent
// profile hash (operator/agentworkers/virtualagent) is checked against, byte for byte.
//
// It declares the seed's Overlay and Profile shapes with their json tags and hashes a
// profile the way the seed does: json.Marshal, decode into a generic value,
// json.Marshal again, SHA-256 hex of that. Besides whole profiles it records how Go
// prints float64 values, escapes strings and trims whitespace, the three places a
// port is most likely to drift. Standard library only.
//
// Regenerate from the repository root:
//
//	(cd hack/golden && GOTOOLCHAIN=local go run .) > tests/unit/virtualagent/golden_vectors.json
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
)

// Overlay is the seed's overlay shape.
type Overlay struct {
	Model           *string   `json:"model,omitempty"`
	Temperature     *float64  `json:"temperature,omitempty"`
	MaxTokens       *int      `json:"max_tokens,omitempty"`
	ReasoningEffort *string   `json:"reasoning_effort,omitempty"`
	Skills          *[]string `json:"skills,omitempty"`
	DisabledTools   []string  `json:"disabled_tools,omitempty"`
	PausedServers   []string  `json:"paused_servers,omitempty"`
	MaxSteps        *int      `json:"max_steps,omitempty"`
	TokenBudget     *int      `json:"token_budget,omitempty"`
	Instructions    string    `json:"instructions,omitempty"`
}

// Profile is the seed's profile shape.
type Profile struct {
	Key              string          `json:"key"`
	Label            string          `json:"label,omitempty"`
	Parent           string          `json:"parent,omitempty"`
	Overlay          Overlay         `json:"overlay,omitempty"`
	InputPatterns    []string        `json:"input_patterns,omitempty"`
	InputCount       int             `json:"input_count,omitempty"`
	InputDisposition string          `json:"input_disposition,omitempty"`
	OutputSchema     json.RawMessage `json:"output_schema,omitempty"`
	OutputSchemaHash string          `json:"output_schema_hash,omitempty"`
}

type profileVector struct {
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	Canonical string          `json:"canonical"`
	Hash      string          `json:"hash"`
}

type floatVector struct {
	Bits string `json:"bits"`
	JSON string `json:"json"`
}

type stringVector struct {
	UTF8Hex string `json:"utf8_hex"`
	JSON    string `json:"json"`
}

type trimVector struct {
	UTF8Hex    string `json:"utf8_hex"`
	TrimmedHex string `json:"trimmed_hex"`
}

type vectors struct {
	Comment  string          `json:"comment"`
	Go       string          `json:"go"`
	Profiles []profileVector `json:"profiles"`
	Floats   []floatVector   `json:"floats"`
	Strings  []stringVector  `json:"strings"`
	Trim     []trimVector    `json:"trim"`
}

// canonicalJSON marshals v, decodes the bytes into a generic value and marshals that.
func canonicalJSON(v any) []byte {
	raw, err := json.Marshal(v)
	must(err)
	var generic any
	must(json.Unmarshal(raw, &generic))
	out, err := json.Marshal(generic)
	must(err)
	return out
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func ptr[T any](v T) *T { return &v }

// withSchema sets a profile's output schema and its hash, the schema's canonical
// JSON digest, as normalisation does.
func withSchema(p Profile, schema string) Profile {
	p.OutputSchema = json.RawMessage(schema)
	p.OutputSchemaHash = sha256Hex(canonicalJSON(p.OutputSchema))
	return p
}

// profiles are already in canonical form: trimmed, lists sorted and de-duplicated.
func profiles() map[string]Profile {
	out := map[string]Profile{
		"empty":                 {},
		"minimal":               {Key: "a"},
		"explicit-empty-skills": {Key: "narrow", Parent: "top", Overlay: Overlay{Skills: &[]string{}}},
		"full-overlay": {
			Key: "reviewer", Label: "Code reviewer", Parent: "top-agent",
			Overlay: Overlay{
				Model:           ptr("gpt-x-mini"),
				Temperature:     ptr(0.7),
				MaxTokens:       ptr(4000),
				ReasoningEffort: ptr("medium"),
				Skills:          &[]string{"review", "summarize"},
				DisabledTools:   []string{"danger.tool", "shell.exec"},
				PausedServers:   []string{"slow.server"},
				MaxSteps:        ptr(10),
				TokenBudget:     ptr(5000),
				Instructions:    "You are a specialist code reviewer.\nBe terse.",
			},
		},
		"limits-at-maximum": {
			Key: "big", Parent: "top",
			Overlay: Overlay{MaxTokens: ptr(1_000_000), MaxSteps: ptr(100_000), TokenBudget: ptr(10_000_000)},
		},
		"limits-at-minimum": {
			Key: "small", Parent: "top",
			Overlay: Overlay{MaxTokens: ptr(1), MaxSteps: ptr(1), TokenBudget: ptr(1)},
		},
		"html-and-controls": {
			Key: "html", Label: "a<b>&c\u2028d\u2029e \"q\" \\ / ok", Parent: "top",
			Overlay: Overlay{
				Model:        ptr("m<>&"),
				Instructions: "line1\nline2\ttab\r\x00\x01\b\f\x1b\x1f\x7f end",
			},
		},
		"non-ascii": {
			Key: "unicode", Label: "agénte ü 日本 😀 \u0085x\u00a0y", Parent: "agénte-日本",
			Overlay: Overlay{
				Skills:       &[]string{"résumé", "技能", "😀"},
				Instructions: "Ünïcödé \ufffd \u200b \ufeff inside",
			},
		},
		"inputs": {
			Key: "inputs", Parent: "top",
			InputPatterns: []string{"*.csv", "image/*", "report-*.pdf"},
			InputCount:    3, InputDisposition: "attach",
		},
		"input-count-beyond-2-53": {Key: "wide", Parent: "top", InputCount: 9007199254740993},
		"input-count-1e18":        {Key: "wider", Parent: "top", InputCount: 1_000_000_000_000_000_000},
		"output-schema": withSchema(Profile{Key: "schema", Parent: "top"}, `{
			"type": "object",
			"required": ["z", "a"],
			"properties": {
				"z": {"type": "number", "maximum": 1e21, "minimum": -0.0, "multipleOf": 1e-7},
				"a": {"type": "array", "items": [1.0, 0.5, 100, 12345678901234567890, 0.1, 2.5e-8, true, false, null, "s<>&"]},
				"ключ": {"const": "значение"},
				"😀": {},
				"B": {"enum": [1e300, -1e-300, 123456789.125, 1E3]}
			},
			"nested": {"deep": {"deeper": [[], [{}], {"x": [1, 2, 3]}]}}
		}`),
		"output-schema-empty-object": withSchema(Profile{Key: "empty-schema", Parent: "top"}, `{}`),
	}
	for name, t := range map[string]float64{
		"temperature-0":                   0,
		"temperature-1":                   1,
		"temperature-0.7":                 0.7,
		"temperature-0.1+0.2":             0.1 + 0.2,
		"temperature-1e-7":                1e-7,
		"temperature-2":                   2,
		"temperature-below-2":             math.Nextafter(2, 0),
		"temperature-1e-6":                1e-6,
		"temperature-large-out-of-bounds": 1e21,
	} {
		out[name] = Profile{Key: "temp", Parent: "top", Overlay: Overlay{Temperature: ptr(t)}}
	}
	return out
}

func floats() []float64 {
	fs := []float64{
		0, math.Copysign(0, -1), 1, -1, 0.1, 0.2, 0.1 + 0.2, 0.7, 2, 100, 1234.5678, 2.0 / 3,
		1e-6, math.Nextafter(1e-6, 0), math.Nextafter(1e-6, 1), 1e-7, 1.5e-7, -2.5e-8, 0.000001234,
		1e20, 1e21, math.Nextafter(1e21, 0), 1.2345678901234568e20, 1e15, 1e16, 1e17, 1e100,
		1e-100, 5e-324, math.SmallestNonzeroFloat64 * 3, math.MaxFloat64, 1 << 53, 1<<53 + 2,
		float64(1<<62) * 3, 123456789.125, 1e300, -1e-300,
	}
	r := rand.New(rand.NewPCG(2026, 8))
	for len(fs) < 400 {
		f := math.Float64frombits(r.Uint64())
		if !math.IsNaN(f) && !math.IsInf(f, 0) {
			fs = append(fs, f)
		}
	}
	for range 200 {
		fs = append(fs, float64(r.Int64N(1_000_000_000))/math.Pow10(r.IntN(13)))
	}
	for range 200 {
		fs = append(fs, (r.Float64()-0.5)*math.Pow10(r.IntN(50)-25))
	}
	return fs
}

func stringSamples() []string {
	var ss []string
	for c := rune(0); c < 0x80; c++ {
		ss = append(ss, string(c))
	}
	return append(ss,
		"\u0085", "\u00a0", "é", "日本", "😀", "\u2028", "\u2029", "\ufffd", "\u200b", "\ufeff",
		"<script>alert('x') && 1</script>", "a\"b\\c/d", "tab\there\nnew<>&\u2028x\u2029y",
	)
}

func trimSamples() []string {
	spaces := []string{
		"\t", "\n", "\v", "\f", "\r", " ", "\x1c", "\x1d", "\x1e", "\x1f", "\u0085", "\u00a0",
		"\u1680", "\u180e", "\u200b", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff",
	}
	for c := rune(0x2000); c <= 0x200a; c++ {
		spaces = append(spaces, string(c))
	}
	ss := []string{"", " ", "x", " \t\n x y \r\n ", strings.Join(spaces, "") + "x" + strings.Join(spaces, "")}
	for _, s := range spaces {
		ss = append(ss, s+"x"+s, s+s)
	}
	return ss
}

func main() {
	v := vectors{
		Comment: "Generated by hack/golden; do not edit. Regenerate: " +
			"(cd hack/golden && GOTOOLCHAIN=local go run .) > tests/unit/virtualagent/golden_vectors.json",
		Go: runtime.Version(),
	}
	ps := profiles()
	names := make([]string, 0, len(ps))
	for name := range ps {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p := ps[name]
		input, err := json.Marshal(p)
		must(err)
		canon := canonicalJSON(p)
		v.Profiles = append(v.Profiles, profileVector{name, input, string(canon), sha256Hex(canon)})
	}
	for _, f := range floats() {
		out, err := json.Marshal(f)
		must(err)
		v.Floats = append(v.Floats, floatVector{fmt.Sprintf("%016x", math.Float64bits(f)), string(out)})
	}
	for _, s := range stringSamples() {
		out, err := json.Marshal(s)
		must(err)
		v.Strings = append(v.Strings, stringVector{hex.EncodeToString([]byte(s)), string(out)})
	}
	for _, s := range trimSamples() {
		v.Trim = append(v.Trim, trimVector{hex.EncodeToString([]byte(s)), hex.EncodeToString([]byte(strings.TrimSpace(s)))})
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	must(enc.Encode(v))
}
