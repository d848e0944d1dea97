package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestLinks(t *testing.T) {
	md := "See [a](x.md) and ![img](p.png \"t\") and [b](<y z.md>).\n" +
		"`[code](no.md)` ``[also](no.md)`` \\[esc](no.md)\n" +
		"```\n[fenced](no.md)\n```\n" +
		"~~~~go\n[tilde](no.md)\n~~~~\n" +
		"[nested [x]](n.md) [paren](f(1).md) [bad](open\n"
	got := Links(md)
	require.Equal(t, []Link{{"a", "x.md"}, {"img", "p.png"}, {"b", "y z.md"}, {"nested [x]", "n.md"}, {"paren", "f(1).md"}}, got)
}

func TestParseTarget(t *testing.T) {
	for raw, want := range map[string]Target{
		"docs/guide.md#L2":      {Path: "docs/guide.md", Line: 2},
		"a.go#L7C3":             {Path: "a.go", Line: 7},
		"a.go:12":               {Path: "a.go", Line: 12},
		"a.go:0":                {Path: "a.go"},
		"a.go#L2000000":         {Path: "a.go"},
		"my%20file.txt":         {Path: "my file.txt"},
		"./x/../y.txt":          {Path: "y.txt"},
		"/etc/passwd":           {Path: "/etc/passwd", Absolute: true},
		"file:///w/a%20b.md#L3": {Path: "/w/a b.md", Absolute: true, Line: 3},
	} {
		got, err := ParseTarget(raw)
		require.NoError(t, err, raw)
		require.Equal(t, want, got, raw)
	}
	for _, raw := range []string{"https://e.com/a.md", "mailto:x@y", "a%00b", "%zz", "", "file://host/x", "#L3"} {
		_, err := ParseTarget(raw)
		require.Error(t, err, raw)
	}
}

// TestWorkspace13_FileReference: one reference for the guide link (line,
// label, media type, digest, id), none for a web URL, an absolute path
// out of the root or a duplicate; schema-valid.
func TestWorkspace13_FileReference(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "docs/guide.md", "# Guide\nline two\n")
	r := openRoot(t, dir)
	msg := "See [the guide](docs/guide.md#L2), [x](https://e.com/a.md), [out](/etc/passwd), [dup](docs/guide.md#L2)"
	refs := r.References(context.Background(), "pt-1", dir, msg, noRedact)
	require.Len(t, refs, 1)
	ref := refs[0]
	require.Equal(t, "docs/guide.md", ref.Path)
	require.Equal(t, 2, *ref.Line)
	require.Equal(t, "the guide", ref.DisplayName)
	require.Equal(t, "document", ref.Presentation)
	require.Equal(t, "text/markdown", *ref.MediaType)
	sum := sha256.Sum256([]byte("# Guide\nline two\n"))
	require.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), *ref.ContentDigest)
	id := sha256.Sum256([]byte("pt-1\x00docs/guide.md:2"))
	require.Equal(t, "pt-1:file:"+hex.EncodeToString(id[:])[:24], ref.ReferenceID)
	require.Equal(t, "# Guide\nline two\n", *ref.Preview)
	require.False(t, ref.PreviewTruncated)
	require.Equal(t, SourceVerified, ref.Source)
	requireValid(t, nil, refs)
}

// TestWorkspace14_ReferenceLimits: 40 links → 32 references; a missing
// file, a symlink out, file:///etc/hosts, %00, a fenced link, ../ → none;
// a 2 MiB file → no preview or digest; .env and k.pem → no preview.
func TestWorkspace14_ReferenceLimits(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 40 {
		write(t, dir, "f"+itoa(i)+".txt", "x\n")
		b.WriteString("[f](f" + itoa(i) + ".txt) ")
	}
	r := openRoot(t, dir)
	require.Len(t, r.References(context.Background(), "pt", dir, b.String(), noRedact), MaxReferences)

	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "out")))
	require.NoError(t, os.Symlink("../..", filepath.Join(dir, "up")))
	require.NoError(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	none := "[m](missing.md) [s](out) [u](up/etc/passwd) [h](file:///etc/hosts) [n](a%00.txt) [p](../../etc/passwd) " +
		"[fifo](fifo) [d](sub) [w](" + dir + "/../x)\n```\n[c](f1.txt)\n```\n`[i](f2.txt)`"
	require.Empty(t, r.References(context.Background(), "pt", dir, none, noRedact))

	write(t, dir, "big.md", strings.Repeat("a", 2<<20))
	write(t, dir, ".env", "K=v\n")
	write(t, dir, "k.pem", "pem\n")
	write(t, dir, "secret.txt", "token sk-ant-"+strings.Repeat("x", 20)+"\n")
	write(t, dir, "bin.dat", "a\x00b")
	redact := func(s string) string { return strings.ReplaceAll(s, "sk-ant-", "[REDACTED]") }
	refs := r.References(context.Background(), "pt", dir, "[b](big.md) [e](.env) [k](k.pem) [s](secret.txt) [bin](bin.dat) [abs]("+dir+"/f3.txt:4)", redact)
	require.Len(t, refs, 6)
	m := map[string]FileReference{}
	for _, ref := range refs {
		m[ref.Path] = ref
	}
	require.Nil(t, m["big.md"].Preview)
	require.Nil(t, m["big.md"].ContentDigest)
	require.True(t, m["big.md"].PreviewTruncated)
	for _, p := range []string{".env", "k.pem", "secret.txt", "bin.dat"} {
		require.Nil(t, m[p].Preview, p)
		require.NotNil(t, m[p].ContentDigest, p)
	}
	require.Equal(t, 4, *m["f3.txt"].Line)
	require.Nil(t, m["bin.dat"].MediaType)
	require.Equal(t, "generic", m["bin.dat"].Presentation)
	requireValid(t, nil, refs)
}

func TestMediaTypes(t *testing.T) {
	for p, want := range map[string][2]string{
		"a.MDX": {"text/markdown", "document"}, "a.rst": {"text/plain", "document"},
		"a.jpg": {"image/jpeg", "image"}, "a.webp": {"image/webp", "image"}, "a.go": {"text/plain", "code"},
		"a.sh": {"text/plain", "code"},
	} {
		mt, pres := mediaType(p)
		require.Equal(t, want, [2]string{*mt, pres}, p)
	}
}
