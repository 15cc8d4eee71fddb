{#- A table, built once per publication: chart_rankings reads it once per policy, and as a
    view this aggregation would run again for every read. Unsorted: the rankings partition it
    themselves, and sorting its rows (650k at 10M events) cost 0.4 s of every publication. -#}
{{ config(materialized='table', order_by='tuple()') }}

{%- set windows = chart_windows() -%}

-- as_of is one scalar for the whole query (a cross join with the as_of table made every
-- window's test twice as slow); only the buckets and days some window counts are read. A
-- scalar subquery is Nullable (it could find no row; this table always holds one), and so
-- would be every window's test and sum: assumeNotNull keeps them plain numbers
with assumeNotNull((select as_of from {{ ref('int_chart__as_of') }})) as as_of,

buckets as (

    select * from {{ ref('stg_toplist__listen_buckets') }}
    where {{ buckets_counted('bucket_start', 'as_of') }}

),

days as (

    select * from {{ ref('stg_toplist__listen_days') }}
    where {{ days_counted('day', 'as_of') }}

),

weeks as (

    select * from {{ ref('stg_toplist__listen_weeks') }}
    where {{ weeks_counted('week', 'as_of') }}

),

totals as (

    select * from {{ ref('stg_toplist__listen_totals') }}

),

-- every song counted is in the totals (every write to the buckets reaches them, sql/0013): the
-- groupings below carry its key alone (a string carried through them cost a fifth of this
-- model), and its id comes back at the end. A key two ids share, or one the totals lack, stops
-- the build (final) instead of adding listens up or leaving them out (macros/keys.sql)
songs as (

    select
        {{ song_key('song_id') }} as song_key,
        min(song_id) as first_id,
        max(song_id) as last_id
    from totals
    group by song_key

),

pieces as (

    select 'bucket' as piece, bucket_start as starts, country, song_id, listens from buckets
    union all
    select 'day' as piece, day as starts, country, song_id, listens from days
    union all
    select 'week' as piece, week as starts, country, song_id, listens from weeks
    union all
    select 'total' as piece, toDateTime(0, 'UTC') as starts, country, song_id, listens from totals

),

-- each row on integer keys, with how it counts towards each window (1, 0 or -1) as one
-- number: digit i (base 3) is window i's share + 1
keyed as (

    select
        {{ country_key('country') }} as country_key,
        {{ song_key('song_id') }} as song_key,
        toUInt16(
            {%- for window_name in windows %}
            ({{ window_share(window_name, 'piece', 'starts', 'as_of') }} + 1) * {{ 3 ** loop.index0 }}{{ " +" if not loop.last }}
            {%- endfor %}
        ) as shares,
        listens
    from pieces

),

-- each country and song once per window: one grouping of every row into the (country, song)
-- pairs (fewer and smaller groups than by each row's shares first, then per pair)
by_pair as (

    select
        country_key,
        song_key,
        {%- for window_name in windows %}
        sum(listens * (intDiv(shares, {{ 3 ** loop.index0 }}) % 3 - 1)) as listens_{{ window_name }}{{ "," if not loop.last }}
        {%- endfor %}
    from keyed
    group by country_key, song_key

),

-- then each country and global (two grouping sets over the pairs)
by_scope as (

    select
        if(grouping(country_key) = 0, {{ country_of_key('country_key') }}, 'global') as scope,
        song_key,
        {%- for window_name in windows %}
        sum(listens_{{ window_name }}) as listens_{{ window_name }}{{ "," if not loop.last }}
        {%- endfor %}
    from by_pair
    group by grouping sets ((country_key, song_key), (song_key))

),

named as (

    select by_scope.*, songs.first_id as song_id, songs.last_id as other_id
    from by_scope
    left join songs using (song_key)

),

final as (

    select
        window_name,
        scope,
        song_id,
        toUInt64(listens) as listens
    from named
    array join
        [{% for window_name in windows %}'{{ window_name }}'{{ ", " if not loop.last }}{% endfor %}] as window_name,
        [{% for window_name in windows %}listens_{{ window_name }}{{ ", " if not loop.last }}{% endfor %}] as listens
    -- songs with no listens in a window never appear on its board
    where listens > 0
        and throwIf(song_id = '',
            'listens of a song the all-time totals do not hold (sql/0013): they would be left'
            || ' out, so this build stops; toplist rebuild recounts the totals') = 0
        and throwIf(song_id != other_id,
            'two song ids share one 64-bit song key (macros/keys.sql): their listens would add'
            || ' up as one song''s, so this build stops') = 0

)

select * from final
