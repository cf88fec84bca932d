//! Listen addresses as Flux's controllers take them (`--metrics-addr=:8080`), so a manifest
//! written for Flux reads the same here.

use std::net::{IpAddr, Ipv6Addr, SocketAddr, ToSocketAddrs as _};

/// `:PORT` is every interface (Go's `net.Listen` form: IPv6 and IPv4, see
/// `http::listen::bind`), `HOST:PORT` and `[V6]:PORT` one address. A host name is resolved
/// once, here, so a bad one is bad input before any client is built.
pub fn parse(text: &str) -> Result<SocketAddr, String> {
    let port = |port: &str| {
        port.parse::<u16>()
            .map_err(|_| format!("{text:?}: the port is not a number from 0 to 65535"))
    };
    if let Some(rest) = text.strip_prefix(':') {
        return Ok(SocketAddr::new(
            IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            port(rest)?,
        ));
    }
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let (host, rest) = text
        .rsplit_once(':')
        .filter(|(host, _)| !host.is_empty())
        .ok_or_else(|| format!("{text:?}: expected :PORT or HOST:PORT"))?;
    let port = port(rest)?;
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{text:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{text:?}: {host} has no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flux_forms_table() {
        let all = |port| SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port);
        let cases: &[(&str, Result<SocketAddr, &str>)] = &[
            (":8080", Ok(all(8080))),
            (":0", Ok(all(0))),
            ("0.0.0.0:9292", Ok("0.0.0.0:9292".parse().unwrap())),
            ("127.0.0.1:8080", Ok("127.0.0.1:8080".parse().unwrap())),
            ("[::1]:8080", Ok("[::1]:8080".parse().unwrap())),
            ("localhost:8080", Ok("127.0.0.1:8080".parse().unwrap())),
            (":http", Err("the port is not a number")),
            (":70000", Err("the port is not a number")),
            ("8080", Err("expected :PORT or HOST:PORT")),
            ("", Err("expected :PORT or HOST:PORT")),
            ("127.0.0.1:", Err("the port is not a number")),
        ];
        for (text, want) in cases {
            match (parse(text), want) {
                (Ok(got), Ok(want)) if *text == "localhost:8080" => {
                    assert!(
                        got.ip().is_loopback() && got.port() == want.port(),
                        "{text}: {got}"
                    )
                }
                (Ok(got), Ok(want)) => assert_eq!(got, *want, "{text}"),
                (Err(got), Err(words)) => assert!(got.contains(words), "{text}: {got}"),
                (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
            }
        }
    }
}
