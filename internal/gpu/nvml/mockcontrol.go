package nvml

import (
	"fmt"
	"net/http"
	"strconv"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// MockControl serves, for simulated GPUs only, what a real GPU does on its
// own, so that tests and demos can drive an agent running in a pod:
//
//	POST /mock/xid?uuid=GPU-...&xid=79   an XID event on that GPU
//	POST /mock/lost?uuid=GPU-...&lost=true|false   the GPU falls off the bus (or returns)
//	POST /mock/events?fail=true|false   NVML event delivery breaks (or works again)
//	POST /mock/utilization?uuid=GPU-...&gpu=70   the GPU runs at 70 % from now on
//
// Other paths go to next.
func MockControl(m *Mock, next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", next)
	mux.HandleFunc("POST /mock/xid", func(w http.ResponseWriter, r *http.Request) {
		uuid := r.URL.Query().Get("uuid")
		xid, err := strconv.ParseUint(r.URL.Query().Get("xid"), 10, 64)
		if err != nil || uuid == "" {
			http.Error(w, "want ?uuid=<GPU UUID>&xid=<number>", http.StatusBadRequest)
			return
		}
		if err := m.InjectXID(uuid, xid); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		fmt.Fprintf(w, "XID %d on %s\n", xid, uuid)
	})
	mux.HandleFunc("POST /mock/lost", func(w http.ResponseWriter, r *http.Request) {
		uuid := r.URL.Query().Get("uuid")
		lost, err := strconv.ParseBool(r.URL.Query().Get("lost"))
		if err != nil || uuid == "" || !m.known(uuid) {
			http.Error(w, "want ?uuid=<GPU UUID of this node>&lost=true|false", http.StatusBadRequest)
			return
		}
		m.SetLost(uuid, lost)
		fmt.Fprintf(w, "%s lost=%v\n", uuid, lost)
	})
	mux.HandleFunc("POST /mock/utilization", func(w http.ResponseWriter, r *http.Request) {
		uuid := r.URL.Query().Get("uuid")
		gpu, err := strconv.ParseUint(r.URL.Query().Get("gpu"), 10, 32)
		if err != nil || gpu > 100 || !m.SetUtilization(uuid, uint32(gpu)) {
			http.Error(w, "want ?uuid=<GPU UUID of this node>&gpu=<0-100>", http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%s at %d%%\n", uuid, gpu)
	})
	mux.HandleFunc("POST /mock/events", func(w http.ResponseWriter, r *http.Request) {
		fail, err := strconv.ParseBool(r.URL.Query().Get("fail"))
		if err != nil {
			http.Error(w, "want ?fail=true|false", http.StatusBadRequest)
			return
		}
		if fail {
			m.FailEventSetCreate(gonvml.ERROR_UNKNOWN)
			m.FailWait(gonvml.ERROR_UNKNOWN)
		} else {
			m.FailEventSetCreate(gonvml.SUCCESS)
		}
		fmt.Fprintf(w, "event delivery failing=%v\n", fail)
	})
	return mux
}

// known reports whether uuid is one of the mock's GPUs.
func (m *Mock) known(uuid string) bool {
	_, ret := m.srv.DeviceGetHandleByUUID(uuid)
	return ret == gonvml.SUCCESS
}
