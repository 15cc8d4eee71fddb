{#- Integer keys to group by. Grouping by strings hashes every row's bytes; by integers, three
    times faster (measured in bench/README.md "Publication by integer keys"). Each key stands
    for exactly one value: -#}

{% macro country_key(country) -%}
  {#- A country code's two bytes as one number (the parse rule lets only `^[A-Z]{2}$` in),
      and country_of_key gives the code back. -#}
  CAST(reinterpretAsUInt16(toString({{ country }})), 'UInt16')
{%- endmacro %}

{% macro country_of_key(key) -%}
  reinterpretAsString({{ key }})
{%- endmacro %}

{% macro song_key(song_id) -%}
  {#- A song id's 64-bit hash. Two ids could share one (about one chance in ten million at a
      million songs), and their listens would add up as one song's: shared_song_keys counts
      such pairs, so a build can stop rather than publish a wrong count. -#}
  cityHash64({{ song_id }})
{%- endmacro %}

{% macro shared_song_keys(songs) -%}
  {#- How many keys stand for more than one song id in `songs` (a relation with song_id). -#}
  (select count() from (
      select {{ song_key('song_id') }} as song_key from {{ songs }}
      group by song_key having uniqExact(song_id) > 1))
{%- endmacro %}
