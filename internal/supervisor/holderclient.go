package supervisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// HolderClient asks a Holder to start children. One client is one session:
// make one per process (see Holder).
type HolderClient struct {
	socket  string
	session string
	http    *http.Client
}

// NewHolderClient returns a client of the Holder serving on socket.
func NewHolderClient(socket string) *HolderClient {
	var id [8]byte
	_, _ = rand.Read(id[:])
	return &HolderClient{
		socket:  socket,
		session: hex.EncodeToString(id[:]),
		http: &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", socket)
			},
		}},
	}
}

// start has the holder start l, or hand over the child an earlier session
// left running with l's command (the answer says Adopted, and the Root
// that child was started with).
func (c *HolderClient) start(ctx context.Context, l launch) (child, startAnswer, error) {
	// A start may first wait for children left in the slot to stop.
	ctx, cancel := context.WithTimeout(ctx, time.Minute+time.Duration(l.GraceSeconds*float64(time.Second)))
	defer cancel()
	data, err := c.post(ctx, holderStartPath, startRequest{Session: c.session, Launch: l})
	if err != nil {
		return nil, startAnswer{}, err
	}
	var ans startAnswer
	if err := json.Unmarshal(data, &ans); err != nil {
		return nil, startAnswer{}, fmt.Errorf("the process holder's answer: %w", err)
	}
	return watch(ans.PID, ans.StartTime), ans, nil
}

// stopLeft has the holder stop the children earlier sessions left whose
// log file lies in dir, and returns once they are gone.
func (c *HolderClient) stopLeft(ctx context.Context, dir string) error {
	_, err := c.post(ctx, holderStopLeftPath, stopLeftRequest{Session: c.session, Dir: dir})
	return err
}

// post sends req to the holder's path and returns the answer's body.
func (c *HolderClient) post(ctx context.Context, path string, req any) ([]byte, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://holder"+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("asking the process holder (%s): %w", c.socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return nil, fmt.Errorf("asking the process holder: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("the process holder: %s", strings.TrimSpace(string(data)))
	}
	return data, nil
}

// heldChild is a child the holder started: not this process's to wait
// for, so its end is seen through a pidfd.
type heldChild struct {
	id   int
	pidf int // -1 when the child was gone before it was watched
}

// watch opens a pidfd for pid, the process whose start time is startTime:
// when another process took the pid meanwhile, the child has exited.
func watch(pid int, startTime string) heldChild {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return heldChild{id: pid, pidf: -1}
	}
	if st, err := procStartTime(pid); err != nil || st != startTime {
		unix.Close(fd)
		return heldChild{id: pid, pidf: -1}
	}
	return heldChild{id: pid, pidf: fd}
}

func (c heldChild) pid() int { return c.id }

func (c heldChild) wait() []any {
	if c.pidf < 0 {
		return []any{"pid", c.id, "held", true}
	}
	defer unix.Close(c.pidf)
	fds := []unix.PollFd{{Fd: int32(c.pidf), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == nil || !errors.Is(err, unix.EINTR) {
			break
		}
	}
	// The holder reaps it and logs its exit status.
	return []any{"pid", c.id, "held", true}
}
