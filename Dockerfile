# syntax=docker/dockerfile:1
# flux-converger's image: the binary and the kustomize it renders with, nothing else.
#   docker build -t ghcr.io/flux-converger/flux-converger:v0.1.0 .
# tests/it/manifests.rs checks this file (stages, user, every program the binary execs is here).

# The toolchain is pinned so a rebuild of a tag gives the same binary (Cargo.lock pins the rest).
FROM docker.io/library/rust:1.95.0-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target,id=flux-converger-target \
    cargo build --release --locked --bin flux-converger \
 && install -D -m 0755 target/release/flux-converger /out/flux-converger

# The renderer: kustomize built from its module at a pinned version (go.sum and the checksum
# database verify the sources), static so it needs nothing from the final stage.
FROM docker.io/library/golang:1.24.4-bookworm AS kustomize
ARG KUSTOMIZE_VERSION=v5.5.0
RUN CGO_ENABLED=0 GOBIN=/out go install -trimpath -ldflags=-s \
      sigs.k8s.io/kustomize/kustomize/v5@${KUSTOMIZE_VERSION}

# glibc and CA certificates only (the binary links glibc); no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/flux-converger /usr/local/bin/flux-converger
COPY --from=kustomize /out/kustomize /usr/local/bin/kustomize
# The default renderer is `kubectl kustomize`; the image has no kubectl, so point --kustomize at
# the kustomize above, with Flux's load restrictions.
ENV FLUX_CONVERGER_KUSTOMIZE="/usr/local/bin/kustomize build --load-restrictor=LoadRestrictionsNone" \
    TMPDIR=/tmp
USER 65532:65532
# Flux's layout: 9292 /hook, /status, the dashboard (--listen); 8080 /metrics (--metrics-addr).
EXPOSE 9292 8080
ENTRYPOINT ["/usr/local/bin/flux-converger"]
CMD ["serve"]
