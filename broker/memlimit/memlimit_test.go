package memlimit

import "testing"

func TestLimitIsAShareOfTheContainersLimit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    int64
		wantErr bool
	}{
		{name: "no limit given", env: nil, want: 0},
		{name: "512Mi", env: map[string]string{EnvLimit: "536870912"}, want: 483183820},
		{name: "blanks around the number", env: map[string]string{EnvLimit: " 1000 "}, want: 900},
		{name: "GOMEMLIMIT wins", env: map[string]string{EnvLimit: "1000", "GOMEMLIMIT": "800MiB"}, want: 0},
		{name: "a quantity, not bytes", env: map[string]string{EnvLimit: "512Mi"}, wantErr: true},
		{name: "zero", env: map[string]string{EnvLimit: "0"}, wantErr: true},
		{name: "negative", env: map[string]string{EnvLimit: "-5"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Limit(func(k string) string { return tc.env[k] })
			if (err != nil) != tc.wantErr {
				t.Fatalf("Limit: error %v, want an error: %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("Limit = %d, want %d", got, tc.want)
			}
		})
	}
}
