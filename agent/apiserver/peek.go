package apiserver

import (
	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"net/http"
)

func (s *Server) peek(w http.ResponseWriter, r *http.Request) {
	t, err := s.task(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	p, ok := t.(agentapi.Peeker)
	if !ok {
		writeError(w, executor.Errorf(executor.ErrInvalid, "agent: task %s cannot be peeked", t.ID()))
		return
	}
	o, err := p.Peek(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}
