//! MemObjects: an object store in RAM, for unit tests of the logic above the
//! store (naming, the writer lease, later the segment store). It keeps the
//! trait's write-once rule under one mutex, so a conditional create is atomic
//! here as it is in S3. It promises nothing about durability: that is tested
//! against a real server only.

use super::{check_name, check_range, ObjError, ObjectInfo, ObjectStore};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Default)]
pub struct MemObjects {
    objects: Mutex<BTreeMap<String, Arc<Vec<u8>>>>,
    requests: AtomicU64,
    unreachable: AtomicBool,
}

impl MemObjects {
    pub fn new() -> MemObjects {
        MemObjects::default()
    }
    /// Requests answered or refused so far (every trait call that reached the
    /// store counts one; an empty range counts none).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
    /// While set, every call fails with `ObjError::Store` (the store is down).
    pub fn set_unreachable(&self, down: bool) {
        self.unreachable.store(down, Ordering::Relaxed);
    }
    /// Replace an object's bytes behind the trait's back (damage tests).
    pub fn poke(&self, name: &str, bytes: Vec<u8>) {
        self.objects
            .lock()
            .insert(name.to_string(), Arc::new(bytes));
    }

    /// A copy of every object as it is now (a host vanishing at this
    /// moment leaves the store like this).
    pub fn snapshot(&self) -> MemObjects {
        MemObjects {
            objects: Mutex::new(self.objects.lock().clone()),
            ..MemObjects::default()
        }
    }

    fn enter(&self, name: &str) -> Result<(), ObjError> {
        check_name(name)?;
        self.requests.fetch_add(1, Ordering::Relaxed);
        if self.unreachable.load(Ordering::Relaxed) {
            return Err(ObjError::Store("memory store set unreachable".into()));
        }
        Ok(())
    }

    fn find(&self, name: &str) -> Result<Arc<Vec<u8>>, ObjError> {
        self.objects
            .lock()
            .get(name)
            .cloned()
            .ok_or_else(|| ObjError::NotFound(name.to_string()))
    }
}

impl ObjectStore for MemObjects {
    fn put_new(&self, name: &str, bytes: &[u8]) -> Result<(), ObjError> {
        self.enter(name)?;
        let mut objects = self.objects.lock();
        match objects.get(name) {
            Some(old) if old.as_slice() == bytes => Ok(()),
            Some(_) => Err(ObjError::Exists(name.to_string())),
            None => {
                objects.insert(name.to_string(), Arc::new(bytes.to_vec()));
                Ok(())
            }
        }
    }

    fn get_range(&self, name: &str, range: Range<u64>) -> Result<Vec<u8>, ObjError> {
        check_range(name, &range)?;
        if range.is_empty() {
            check_name(name)?;
            return Ok(Vec::new());
        }
        self.enter(name)?;
        let obj = self.find(name)?;
        let len = obj.len() as u64;
        if range.end > len {
            return Err(ObjError::Short {
                name: name.to_string(),
                start: range.start,
                end: range.end,
                len,
            });
        }
        Ok(obj[range.start as usize..range.end as usize].to_vec())
    }

    fn get(&self, name: &str) -> Result<Vec<u8>, ObjError> {
        self.enter(name)?;
        Ok(self.find(name)?.as_ref().clone())
    }

    fn head(&self, name: &str) -> Result<u64, ObjError> {
        self.enter(name)?;
        Ok(self.find(name)?.len() as u64)
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, ObjError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if self.unreachable.load(Ordering::Relaxed) {
            return Err(ObjError::Store("memory store set unreachable".into()));
        }
        Ok(self
            .objects
            .lock()
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| ObjectInfo {
                name: k.clone(),
                len: v.len() as u64,
            })
            .collect())
    }

    fn delete(&self, name: &str) -> Result<(), ObjError> {
        self.enter(name)?;
        self.objects.lock().remove(name);
        Ok(())
    }

    fn describe(&self) -> String {
        "memory object store".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_new_is_write_once() {
        let s = MemObjects::new();
        s.put_new("a/1", b"first").unwrap();
        // the same bytes again: the same create, Ok
        s.put_new("a/1", b"first").unwrap();
        assert!(matches!(s.put_new("a/1", b"other"), Err(ObjError::Exists(n)) if n == "a/1"));
        assert_eq!(s.get("a/1").unwrap(), b"first");
    }

    #[test]
    fn ranges_are_exact_or_short() {
        let s = MemObjects::new();
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        s.put_new("o", &data).unwrap();
        assert_eq!(s.get_range("o", 3..997).unwrap(), &data[3..997]);
        assert_eq!(s.get_range("o", 999..1000).unwrap(), &data[999..]);
        let before = s.requests();
        assert!(s.get_range("o", 5..5).unwrap().is_empty());
        assert_eq!(s.requests(), before, "an empty range asks nothing");
        assert!(matches!(
            s.get_range("o", 10..1001),
            Err(ObjError::Short { len: 1000, .. })
        ));
        assert!(matches!(
            s.get_range("nope", 0..1),
            Err(ObjError::NotFound(_))
        ));
        assert_eq!(s.head("o").unwrap(), 1000);
    }

    #[test]
    fn list_is_sorted_by_prefix_and_delete_is_idempotent() {
        let s = MemObjects::new();
        for n in ["b/2", "a/1", "b/1", "bb/1", "c"] {
            s.put_new(n, n.as_bytes()).unwrap();
        }
        let names: Vec<_> = s.list("b/").unwrap().into_iter().map(|o| o.name).collect();
        assert_eq!(names, ["b/1", "b/2"]);
        let all: Vec<_> = s.list("").unwrap().into_iter().map(|o| o.name).collect();
        assert_eq!(all, ["a/1", "b/1", "b/2", "bb/1", "c"]);
        s.delete("b/1").unwrap();
        s.delete("b/1").unwrap();
        assert!(matches!(s.head("b/1"), Err(ObjError::NotFound(_))));
    }

    #[test]
    fn an_unreachable_store_fails_every_call() {
        let s = MemObjects::new();
        s.put_new("x", b"1").unwrap();
        s.set_unreachable(true);
        assert!(matches!(s.get("x"), Err(ObjError::Store(_))));
        assert!(matches!(s.put_new("y", b"1"), Err(ObjError::Store(_))));
        assert!(matches!(s.list(""), Err(ObjError::Store(_))));
        s.set_unreachable(false);
        assert_eq!(s.get("x").unwrap(), b"1");
    }
}
