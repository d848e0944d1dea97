package main

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// buildTimeout bounds scripts/build-image-binaries: two cold static builds
// on a shared two-core machine.
const buildTimeout = 5 * time.Minute

// instruction is one Dockerfile instruction with continuations joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, COPY, ...
	args string
}

// parseDockerfile splits a Dockerfile into instructions: comments and blank
// lines dropped, backslash continuations joined. Enough for textual checks;
// Docker itself cannot run on the test machines.
func parseDockerfile(t *testing.T, text string) []instruction {
	t.Helper()
	var out []instruction
	var cur strings.Builder
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\"))
			cur.WriteString(" ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur.Reset()
	}
	require.Zero(t, cur.Len(), "dangling continuation")
	return out
}

// TestDockerfileSandboxProperties checks the properties prp.md §13 and the
// image brief require of Dockerfile.sandbox, textually.
func TestDockerfileSandboxProperties(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(testbin.RepoRoot(t), "Dockerfile.sandbox"))
	require.NoError(t, err)
	ins := parseDockerfile(t, string(data))

	var froms, users, runs, copies, args []string
	for _, in := range ins {
		switch in.cmd {
		case "FROM":
			froms = append(froms, in.args)
		case "USER":
			users = append(users, in.args)
		case "RUN":
			runs = append(runs, in.args)
		case "COPY", "ADD":
			copies = append(copies, in.args)
		case "ARG":
			args = append(args, in.args)
		case "ENTRYPOINT", "CMD":
			t.Errorf("%s %s: the base image's entrypoint must be kept; the server starts runnerd per run", in.cmd, in.args)
		}
	}

	// Multi-stage: a builder from BUILDER_IMAGE (golang:1.26 by default; a
	// local image for the offline image test), then the sandbox base from
	// BASE_IMAGE.
	require.Len(t, froms, 2)
	require.Equal(t, "${BUILDER_IMAGE} AS build", froms[0])
	require.True(t, anyMatch(args, `^BUILDER_IMAGE=golang:1\.26(\S*)?$`), "BUILDER_IMAGE defaults to golang:1.26: %v", args)
	require.Equal(t, "${BASE_IMAGE}", froms[1])
	require.Contains(t, args, "BASE_IMAGE=daytonaio/sandbox:0.8.0")
	// Host-built binaries only when asked (scripts/image-test builds offline).
	require.Contains(t, args, `PREBUILT_BINARIES=""`)
	require.Contains(t, args, `ACP_AGENT_PACKAGES=""`)

	// The builder runs the same script a workstation runs.
	require.True(t, anyMatch(runs, `scripts/build-image-binaries /out;`), "builder must run scripts/build-image-binaries")

	// runnerd as /usr/local/bin/paperclip-runnerd with a runnerd symlink; pcwrap beside it.
	require.True(t, anyMatch(copies, `^--from=build (--chmod=0755 )?/out/runnerd /usr/local/bin/paperclip-runnerd$`))
	require.True(t, anyMatch(copies, `^--from=build (--chmod=0755 )?/out/pcwrap /usr/local/bin/pcwrap$`))
	require.True(t, anyMatch(runs, `ln -sf paperclip-runnerd /usr/local/bin/runnerd`))
	for _, c := range copies {
		require.NotRegexp(t, `^\. |^\./? `, c, "copying the whole build context could bake in stray credentials")
	}

	// Optional npm agents, only when asked.
	require.True(t, anyMatch(runs, `if \[ -n "\$\{ACP_AGENT_PACKAGES\}" \].*npm install -g \$\{ACP_AGENT_PACKAGES\}`))

	// The build fails unless --build-metadata lists all three transport modes.
	check := ""
	for _, r := range runs {
		if strings.Contains(r, "paperclip-runnerd --build-metadata") {
			check = r
		}
	}
	require.NotEmpty(t, check, "no --build-metadata check")
	require.Contains(t, check, "set -eu")
	for _, mode := range []string{"dial_ws_loopback", "dial_wss", "listen_ws"} {
		require.Contains(t, check, mode)
	}
	require.Contains(t, check, "exit 1")
	runMetadataCheck(t, check)

	// The final user is daytona.
	require.NotEmpty(t, users)
	require.Equal(t, "daytona", users[len(users)-1])
	require.Equal(t, "USER", ins[len(ins)-1].cmd, "USER daytona is the last instruction")

	// No credentials baked in: no ENV/ARG/LABEL that assigns a secret-looking
	// name, and no ticket, token or key variable named anywhere.
	secretName := regexp.MustCompile(`(?i)(TICKET|TOKEN|SECRET|PASSWORD|API_KEY|PREVIEW|CREDENTIAL|AUTH)`)
	for _, in := range ins {
		if in.cmd == "ENV" || in.cmd == "ARG" || in.cmd == "LABEL" {
			require.False(t, secretName.MatchString(in.args), "%s %s looks like a baked-in credential", in.cmd, in.args)
		}
	}
	require.NotContains(t, string(data), "PAPERCLIP_RUNNER_BOOTSTRAP_TICKET")
}

func anyMatch(list []string, pattern string) bool {
	re := regexp.MustCompile(pattern)
	for _, s := range list {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

// TestBuildImageBinariesAreStatic runs scripts/build-image-binaries, the
// image's build step, and checks both binaries: static ELF (no interpreter,
// no shared libraries), no symbol table (-s), no local paths (-trimpath),
// and RUNNERD_VERSION reaching --build-metadata.
func TestBuildImageBinariesAreStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries")
	}
	root := testbin.RepoRoot(t)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "build-image-binaries"), out)
	cmd.Env = append(os.Environ(), "RUNNERD_VERSION=9.8.7-image-test")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)

	for _, name := range []string{"runnerd", "pcwrap"} {
		path := filepath.Join(out, name)
		f, err := elf.Open(path)
		require.NoError(t, err)
		for _, p := range f.Progs {
			require.NotEqual(t, elf.PT_INTERP, p.Type, "%s has a program interpreter: not static", name)
		}
		libs, err := f.ImportedLibraries()
		require.NoError(t, err)
		require.Empty(t, libs, "%s links shared libraries", name)
		require.Nil(t, f.Section(".symtab"), "%s keeps its symbol table (-s missing)", name)
		require.NoError(t, f.Close())

		data, err := os.ReadFile(path)
		require.NoError(t, err)
		require.False(t, bytes.Contains(data, []byte(root+"/")), "%s embeds the local path %s (-trimpath missing)", name, root)
	}

	r := runBin(t, filepath.Join(out, "runnerd"), nil, "--build-metadata")
	require.Equal(t, 0, r.code, r.stderr)
	var m struct {
		PackageVersion    string   `json:"packageVersion"`
		PRPTransportModes []string `json:"prpTransportModes"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &m))
	require.Equal(t, "9.8.7-image-test", m.PackageVersion)
	require.Equal(t, []string{"dial_ws_loopback", "dial_wss", "listen_ws"}, m.PRPTransportModes)

	// A bad version string is refused before building.
	bad := exec.CommandContext(ctx, filepath.Join(root, "scripts", "build-image-binaries"), t.TempDir())
	bad.Env = append(os.Environ(), "RUNNERD_VERSION=1.0; rm -rf /")
	require.Error(t, bad.Run())
}

// runMetadataCheck runs the Dockerfile's --build-metadata RUN step with sh,
// first against the real runnerd (it must pass), then against a stand-in
// whose metadata lacks listen_ws (it must fail the build).
func runMetadataCheck(t *testing.T, script string) {
	t.Helper()
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	run := func(dir string) error {
		ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, sh, "-c", script)
		cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		t.Logf("metadata check in %s: %s", dir, out)
		return err
	}

	good := t.TempDir()
	require.NoError(t, os.Symlink(testbin.Path(t, "runnerd"), filepath.Join(good, "paperclip-runnerd")))
	require.NoError(t, run(good), "the real runnerd fails the image's metadata check")

	bad := t.TempDir()
	fake := "#!/bin/sh\nprintf '%s\\n' '{\"prpTransportModes\":[\"dial_ws_loopback\",\"dial_wss\"]}'\n"
	require.NoError(t, os.WriteFile(filepath.Join(bad, "paperclip-runnerd"), []byte(fake), 0o755))
	require.Error(t, run(bad), "a runner without listen_ws passes the image's metadata check")
}
