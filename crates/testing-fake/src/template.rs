//! Templates as data: users, directories, owners and modes of each sandbox template.
