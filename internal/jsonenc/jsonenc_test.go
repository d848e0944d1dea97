package jsonenc

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMarshalForms(t *testing.T) {
	v := struct {
		B string          `json:"b"`
		A int             `json:"a"`
		R json.RawMessage `json:"r"`
	}{B: "x<y>&z\u2028", A: 1, R: json.RawMessage(`{ "k" : "<&>" }`)}
	b, err := Marshal(v)
	require.NoError(t, err)
	require.Equal(t, "{\"b\":\"x<y>&z\\u2028\",\"a\":1,\"r\":{\"k\":\"<&>\"}}", string(b))
	require.Equal(t, string(b), string(MustMarshal(v)))
	require.Equal(t, `{"b":"x\u003cy\u003e\u0026z\u2028","a":1,"r":{"k":"\u003c\u0026\u003e"}}`, string(MustMarshalEscaped(v)))
}

func TestMarshalError(t *testing.T) {
	_, err := Marshal(func() {})
	require.Error(t, err)
	require.Panics(t, func() { MustMarshal(make(chan int)) })
	require.Panics(t, func() { MustMarshalEscaped(make(chan int)) })
}
