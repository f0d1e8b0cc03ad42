//! The server name (SNI) of a TLS ClientHello, read without a TLS library.

/// What the first bytes of a tunnel say about its TLS server name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hello {
    /// Not a TLS handshake (an ssh banner, plain bytes): nothing to compare.
    NotTls,
    /// A ClientHello, with its server name if it names one.
    Tls(Option<String>),
    /// A TLS record that is not complete yet.
    NeedMore,
    /// A TLS handshake that does not parse.
    Malformed,
}

fn take<'a>(data: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if data.len() < n {
        return None;
    }
    let (head, rest) = data.split_at(n);
    *data = rest;
    Some(head)
}

fn u8_at(data: &mut &[u8]) -> Option<usize> {
    take(data, 1).map(|b| usize::from(b[0]))
}

fn u16_at(data: &mut &[u8]) -> Option<usize> {
    take(data, 2).map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
}

/// Reads the ClientHello at the start of `data` (its first record, or, when that is cut,
/// as much as the first records carry).
pub(crate) fn client_hello(data: &[u8]) -> Hello {
    if data.first() != Some(&0x16) {
        return Hello::NotTls;
    }
    if data.len() < 5 {
        return Hello::NeedMore;
    }
    let len = usize::from(u16::from_be_bytes([data[3], data[4]]));
    if data.len() < 5 + len {
        return Hello::NeedMore;
    }
    match parse(&data[5..5 + len]) {
        Some(name) => Hello::Tls(name),
        None => Hello::Malformed,
    }
}

fn parse(mut d: &[u8]) -> Option<Option<String>> {
    let d = &mut d;
    if u8_at(d)? != 1 {
        return None; // not a ClientHello
    }
    let len = take(d, 3)?;
    let len = (usize::from(len[0]) << 16) | (usize::from(len[1]) << 8) | usize::from(len[2]);
    let mut body = take(d, len)?;
    let b = &mut body;
    take(b, 2 + 32)?; // version, random
    let sid = u8_at(b)?;
    take(b, sid)?;
    let suites = u16_at(b)?;
    take(b, suites)?;
    let comp = u8_at(b)?;
    take(b, comp)?;
    if b.is_empty() {
        return Some(None);
    }
    let ext_len = u16_at(b)?;
    let mut exts = take(b, ext_len)?;
    let e = &mut exts;
    while !e.is_empty() {
        let kind = u16_at(e)?;
        let len = u16_at(e)?;
        let mut ext = take(e, len)?;
        if kind == 0 {
            let x = &mut ext;
            let list_len = u16_at(x)?;
            let mut list = take(x, list_len)?;
            let l = &mut list;
            while !l.is_empty() {
                let name_type = u8_at(l)?;
                let name_len = u16_at(l)?;
                let name = take(l, name_len)?;
                if name_type == 0 {
                    return std::str::from_utf8(name).ok().map(|s| Some(s.to_string()));
                }
            }
            return None;
        }
    }
    Some(None)
}

/// A minimal ClientHello naming `name` (tests and benches).
#[doc(hidden)]
pub fn client_hello_for(name: &str) -> Vec<u8> {
    let name = name.as_bytes();
    let mut sni = Vec::new();
    sni.extend_from_slice(&((name.len() + 3) as u16).to_be_bytes());
    sni.push(0);
    sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
    sni.extend_from_slice(name);
    let mut exts = Vec::new();
    exts.extend_from_slice(&0u16.to_be_bytes());
    exts.extend_from_slice(&(sni.len() as u16).to_be_bytes());
    exts.extend_from_slice(&sni);
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.push(0); // session id
    body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one suite
    body.extend_from_slice(&[1, 0]); // null compression
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut hs = vec![1, 0, (body.len() >> 8) as u8, body.len() as u8];
    hs[1] = (body.len() >> 16) as u8;
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 3, 1];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_server_name() {
        let hello = client_hello_for("pkg.test");
        assert_eq!(client_hello(&hello), Hello::Tls(Some("pkg.test".into())));
        assert_eq!(client_hello(&hello[..20]), Hello::NeedMore);
        assert_eq!(client_hello(b"SSH-2.0-OpenSSH\r\n"), Hello::NotTls);
        let mut bad = hello.clone();
        bad[5] = 2;
        assert_eq!(client_hello(&bad), Hello::Malformed);
    }
}
