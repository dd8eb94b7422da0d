package gitsource

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"golang.org/x/crypto/ssh"
)

// sshGitServer serves git-upload-pack over ssh on loopback to one client
// key, as a git host does; it returns its address and host key.
func sshGitServer(t *testing.T, client ssh.PublicKey) (addr string, hostKey ssh.PublicKey) {
	t.Helper()
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if string(k.Marshal()) == string(client.Marshal()) {
			return nil, nil
		}
		return nil, fmt.Errorf("unknown key")
	}}
	cfg.AddHostKey(signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveSSH(c, cfg)
		}
	}()
	return ln.Addr().String(), signer.PublicKey()
}

func serveSSH(c net.Conn, cfg *ssh.ServerConfig) {
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go func() {
			defer ch.Close()
			for req := range creqs {
				if req.Type != "exec" {
					req.Reply(false, nil)
					continue
				}
				n := binary.BigEndian.Uint32(req.Payload)
				fields := strings.Fields(string(req.Payload[4 : 4+n]))
				if len(fields) != 2 || fields[0] != "git-upload-pack" {
					req.Reply(false, nil)
					return
				}
				req.Reply(true, nil)
				cmd := exec.Command("git-upload-pack", strings.Trim(fields[1], `'"`))
				cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
				code := uint32(0)
				if err := cmd.Run(); err != nil {
					code = 1
				}
				ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, code))
				return
			}
		}()
	}
}

// TestFetchSSHWithKey fetches over ssh with a key the server knows and
// the server's host key in known_hosts; a host key that does not match
// and a key the server does not know are refused. Skipped where git is not
// installed (the server runs git-upload-pack).
func TestFetchSSHWithKey(t *testing.T) {
	if _, err := exec.LookPath("git-upload-pack"); err != nil {
		t.Skip("git-upload-pack is not installed")
	}
	origin := t.TempDir()
	repo, err := git.PlainInitWithOptions(origin, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.NewBranchReferenceName("main")}})
	if err != nil {
		t.Fatal(err)
	}
	want := commitFiles(t, repo, origin, map[string]string{"cm.yaml": "kind: ConfigMap\n"}, "first")

	key := func() ([]byte, ssh.PublicKey) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		block, err := ssh.MarshalPrivateKey(priv, "")
		if err != nil {
			t.Fatal(err)
		}
		s, err := ssh.NewSignerFromKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(block), s.PublicKey()
	}
	identity, pub := key()
	stranger, _ := key()
	addr, hostKey := sshGitServer(t, pub)
	host, port, _ := net.SplitHostPort(addr)
	knownHosts := []byte(fmt.Sprintf("[%s]:%s %s", host, port, ssh.MarshalAuthorizedKey(hostKey)))
	_, otherHost := key()
	wrongHosts := []byte(fmt.Sprintf("[%s]:%s %s", host, port, ssh.MarshalAuthorizedKey(otherHost)))

	url := fmt.Sprintf("ssh://git@%s%s", addr, filepath.Join(origin, ".git"))
	ctx := context.Background()
	good := Repo{URL: url, Dir: filepath.Join(t.TempDir(), "c"), Creds: Credentials{Identity: identity, KnownHosts: knownHosts}}
	if err := good.Fetch(ctx); err != nil {
		t.Fatalf("fetch with the key: %v", err)
	}
	if c, err := good.Resolve("main"); err != nil || c.Hash != want {
		t.Fatalf("Resolve(main) = %v, %v; want %s", c, err, want)
	}
	for name, creds := range map[string]Credentials{
		"unknown key":        {Identity: stranger, KnownHosts: knownHosts},
		"host key not known": {Identity: identity, KnownHosts: wrongHosts},
	} {
		r := Repo{URL: url, Dir: filepath.Join(t.TempDir(), "c"), Creds: creds}
		if err := r.Fetch(ctx); !errors.Is(err, ErrAuth) {
			t.Errorf("%s: %v, want ErrAuth", name, err)
		}
	}
}
